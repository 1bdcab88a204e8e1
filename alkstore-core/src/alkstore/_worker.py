"""The Worker: claims jobs, runs a handler on each, and settles every claim.

It works on a sync :class:`~alkstore.Store` or an :class:`~alkstore.AsyncStore`.
One dispatch loop claims (in batches when work is plentiful) and parks on the
queue's wakes when idle; ``concurrency`` handlers run at once; every held job
is heartbeated well before its deadline, so long jobs are never reclaimed
while they run. On stop, jobs not yet started are released at once and
running ones get ``grace_s`` to finish before they are released too: nothing
is lost, and nothing stays claimed until its visibility timeout when it could
be released.

Two runners carry this out, deciding alike (``_worker_ledger``): ``run`` on
threads (``_worker_threads``), ``run_async`` as asyncio tasks
(``_worker_async``) — natively awaiting an AsyncStore's queue, or putting a
sync store's calls on threads.

A database outage never ends the worker: claims, heartbeats and settles that
fail are retried after capped pauses, with one warning per outage. A handler
raising a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
``KeyboardInterrupt``) stops the worker gracefully, and the run re-raises it;
so does any thread or task of the worker dying, so a worker never stalls silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from alkstore._async_job import AsyncJob
from alkstore._async_outbox import AsyncOutbox
from alkstore._async_queue import AsyncQueue
from alkstore._async_store import AsyncStore
from alkstore._handler_shapes import check_handler
from alkstore._job import Job
from alkstore._names import check_identifier
from alkstore._options import check_duration, check_int
from alkstore._outbox import Outbox
from alkstore._queue import MAX_BATCH, Queue
from alkstore._run_stats import RunStats
from alkstore._signals import stop_on_signals
from alkstore._store import (
    StopSignal,
    Store,
    check_async_stop_signal,
    check_stop_signal,
    check_store,
    default_owner,
)
from alkstore._worker_async import AsyncQueuePort, AsyncRunner, OffloadedQueuePort
from alkstore._worker_ledger import Ledger
from alkstore._worker_threads import ThreadRunner

__all__ = ["Handler", "Worker"]

Handler = Callable[[Job], object | Awaitable[object]] | Callable[[AsyncJob], object]
"""Called with each claimed job; may be a coroutine function.

On a sync store it gets a :class:`Job`, on an :class:`AsyncStore` an
:class:`AsyncJob`. Returning acks the job; raising an ``Exception`` retries
it on the backoff curve (dead letters after its last attempt), recording
``Type: message``. Raising any other ``BaseException`` stops the worker,
which re-raises it.
"""


class Worker:
    """Runs ``handler`` on every job of ``queue`` until told to stop.

    ``store`` is a :class:`Store` or an :class:`AsyncStore`. On a ``Store``,
    :meth:`run` works on threads and :meth:`run_async` in an event loop; on an
    ``AsyncStore`` only :meth:`run_async` works (``run`` raises
    ``TypeError``): it awaits the store's queue, coroutine handlers run on
    the loop, and no thread is started per claim.

    ``queue`` is a queue name, a queue from ``store.queue(...)`` (its
    declared opts apply), or an outbox from ``store.outbox(...)`` (its sends
    are the jobs). ``concurrency`` handlers run at once. ``batch_size`` (at
    least, and by default, ``concurrency``) is how many jobs the worker holds
    at most: raise it to claim short jobs ahead in batches, refilled when half
    are done. ``grace_s`` is how long running jobs may finish at shutdown.
    ``idle_wait_s`` bounds one idle park on the queue's wakes, a safety net
    only: wakes end a park early, and ``stop`` is seen at once.
    """

    def __init__(
        self,
        store: Store | AsyncStore,
        queue: str | Queue | Outbox | AsyncQueue | AsyncOutbox,
        handler: Handler,
        *,
        concurrency: int = 1,
        worker_id: str | None = None,
        batch_size: int | None = None,
        grace_s: float = 30.0,
        idle_wait_s: float = 5.0,
    ) -> None:
        check_store(store)
        check_handler(handler)
        self.store = store
        """The store the worker claims from."""
        self.queue: Queue | AsyncQueue = _resolve_queue(store, queue)
        """The queue it works (an outbox's backing queue for an outbox)."""
        self.handler = handler
        """Called with each claimed job; returning acks it, raising retries or kills it."""
        self.concurrency = check_int(concurrency, "concurrency", minimum=1, maximum=1024)
        """How many handlers run at once."""
        self.batch_size = check_int(
            self.concurrency if batch_size is None else batch_size,
            "batch_size", minimum=self.concurrency, maximum=MAX_BATCH,
        )  # fmt: skip
        """How many jobs the worker holds at most, claimed ahead in batches."""
        self.worker_id = check_identifier(
            default_owner() if worker_id is None else worker_id, "worker_id"
        )
        """The identifier the worker's claims carry (``host:pid:random`` by default)."""
        self.grace_s = check_duration(grace_s, "grace_s", zero_ok=True)
        """How long running jobs may finish at shutdown before they are released."""
        self.idle_wait_s = check_duration(idle_wait_s, "idle_wait_s", zero_ok=False)
        """The longest idle park on the queue's wakes (wakes end a park early)."""
        self._ledger = Ledger(
            self.queue.name, self.worker_id, self.concurrency, self.batch_size,
            lease_s=float(self.queue.opts.visibility_timeout_s),
        )  # fmt: skip
        self._running = False

    # Running

    def run(self, stop: StopSignal) -> None:
        """Work until ``stop`` is set, then shut down gracefully and return.

        Async handlers run on an event loop per handler thread; in asyncio
        code prefer :meth:`run_async`.

        Raises:
            TypeError: the worker's store is an :class:`AsyncStore`, whose
                calls belong to the event loop it was opened in: use
                ``await worker.run_async(stop)`` there.
            BaseException: a handler raised one that is not an ``Exception``
                (``SystemExit``, ``KeyboardInterrupt``), or a thread of the
                worker died. The worker first shut down as if stopped: its job
                released, other running jobs given ``grace_s``, nothing held.
        """
        queue = self._sync_queue("run(stop)")
        check_stop_signal(stop)
        handler: Callable[[Any], object] = self.handler
        runner = ThreadRunner(
            self._ledger, queue, self.worker_id, handler,
            grace_s=self.grace_s, idle_wait_s=self.idle_wait_s,
        )  # fmt: skip
        self._begin()
        try:
            runner.run(stop)
        finally:
            self._running = False
        self._ledger.raise_if_aborted()

    def run_forever(self) -> None:
        """Work until SIGTERM or SIGINT, then shut down gracefully.

        A second signal cuts the grace period short: running jobs are released
        at once.

        Raises:
            TypeError: the worker's store is an :class:`AsyncStore` (see :meth:`run`).
        """
        self._sync_queue("run_forever()")
        with stop_on_signals(on_second=self.hurry) as stop:
            self.run(stop)

    def hurry(self) -> None:
        """End a shutdown's grace period now: running jobs are released at once.

        Safe to call from any thread (a signal handler, say), whichever way the worker runs.
        """
        self._ledger.hurry()

    async def run_async(self, stop: asyncio.Event | None = None) -> None:
        """Work in the running event loop until ``stop`` is set or the task is cancelled.

        Coroutine handlers run as tasks, ``concurrency`` at a time; plain
        functions run on daemon threads of the worker's own (as many as run at
        once, so one stuck past shutdown does not hold the process up). On an
        :class:`AsyncStore` every
        database call is awaited on the store's own terms (the store must
        belong to this loop); on a sync :class:`Store` they run on threads.
        Either way they never block the loop.

        On ``stop``, jobs not yet started are released and running ones get
        ``grace_s``, as with :meth:`run`. Cancelling the await cuts the grace
        short: running handlers are cancelled, and every claim is released
        before the cancellation propagates (a claim whose release is cut
        short again comes back after its visibility timeout).

        Raises:
            BaseException: as :meth:`run` does, after the same shutdown.
        """
        stop = asyncio.Event() if stop is None else stop
        check_async_stop_signal(stop)
        queue = self.queue
        port = (
            AsyncQueuePort(queue, self.worker_id)
            if isinstance(queue, AsyncQueue)
            else OffloadedQueuePort(queue, self.worker_id)
        )
        handler: Callable[[Any], object] = self.handler
        runner = AsyncRunner(
            self._ledger, port, handler, grace_s=self.grace_s, idle_wait_s=self.idle_wait_s
        )
        self._begin()
        try:
            await runner.run(stop)
        finally:
            self._running = False
        self._ledger.raise_if_aborted()

    def stats(self) -> RunStats:
        """A snapshot of what this worker has done since it started."""
        return self._ledger.stats()

    def __repr__(self) -> str:
        state = "running" if self._running else "idle"
        return (
            f"<Worker queue={self.queue.name!r} worker_id={self.worker_id!r} "
            f"concurrency={self.concurrency} {state} in_flight={self._ledger.in_flight()}>"
        )

    def _begin(self) -> None:
        if self._running:
            raise RuntimeError(f"{self!r} is already running")
        self._running = True
        self._ledger.begin()

    def _sync_queue(self, call: str) -> Queue:
        """The worker's sync queue, or a TypeError naming the async way for an AsyncStore."""
        if isinstance(self.queue, AsyncQueue):
            raise TypeError(
                f"Worker.{call} needs a sync Store, and {self.store!r} is an AsyncStore, whose "
                "calls belong to its event loop: in that loop use 'await worker.run_async(stop)'"
            )
        return self.queue


def _resolve_queue(
    store: Store | AsyncStore, queue: str | Queue | Outbox | AsyncQueue | AsyncOutbox
) -> Queue | AsyncQueue:
    if isinstance(queue, (Outbox, AsyncOutbox)):
        resolved: Queue | AsyncQueue = queue._queue
    elif isinstance(queue, (Queue, AsyncQueue)):
        resolved = queue
    elif isinstance(queue, str):
        return store.queue(queue)
    else:
        raise TypeError(f"queue must be a name, a queue or an outbox, not {type(queue).__name__}")
    if resolved._store is not store:
        raise ValueError(f"{queue!r} belongs to another store than {store!r}")
    return resolved
