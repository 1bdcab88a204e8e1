"""The Worker: claims jobs, runs a handler on each, and settles every claim.

One dispatch loop claims (in batches when work is plentiful) and parks on the
queue's wakes when idle. Handlers run on ``concurrency`` threads, or as
asyncio tasks under :meth:`Worker.run_async`. A keeper thread heartbeats every
held job well before its deadline, so long jobs are never reclaimed while they
run. On stop, jobs not yet started are released at once and running ones get
``grace_s`` to finish before they are released too: nothing is lost, and
nothing stays claimed until its visibility timeout when it could be released.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from alkstore._errors import Closed, Error
from alkstore._job import Job
from alkstore._names import check_identifier
from alkstore._options import check_duration, check_int
from alkstore._outbox import Outbox
from alkstore._queue import MAX_BATCH, Queue
from alkstore._receivers import resolve_future
from alkstore._running import RunStats, call_to_completion
from alkstore._signals import SIGNAL_CHECK_S, stop_on_signals
from alkstore._store import StopSignal, Store, default_owner

__all__ = ["Handler", "Worker"]

log = logging.getLogger("alkstore.worker")

Handler = Callable[[Job], object | Awaitable[object]]
"""Called with each claimed :class:`Job`; may be a coroutine function.

Returning acks the job; raising an ``Exception`` retries it on the backoff
curve (dead letters after its last attempt), recording ``Type: message``.
"""

_MIN_LEASE_S = 0.05
_ERROR_PAUSE_S = 1.0


@dataclass(eq=False)
class _Held:
    """A claim the worker holds, and when it next needs a heartbeat."""

    job: Job
    lease_s: float
    beat_at: float
    started: bool = False
    heartbeat_failed: bool = False
    sequence: int = 0


class Worker:
    """Runs ``handler`` on every job of ``queue`` until told to stop.

    ``queue`` is a queue name, a :class:`Queue` from ``store.queue(...)`` (its
    declared opts apply), or an :class:`Outbox` (its sends are the jobs).
    ``concurrency`` handlers run at once. ``batch_size`` (at least, and by
    default, ``concurrency``) is how many jobs the worker holds at most:
    raise it to claim short jobs ahead in batches, refilled when half are
    done. ``grace_s`` is how long running jobs may finish at shutdown.
    ``idle_wait_s`` bounds one idle park on the queue's wakes, a safety net
    only: wakes end a park early, and ``stop`` is seen at once.
    """

    def __init__(
        self,
        store: Store,
        queue: str | Queue | Outbox,
        handler: Handler,
        *,
        concurrency: int = 1,
        worker_id: str | None = None,
        batch_size: int | None = None,
        grace_s: float = 30.0,
        idle_wait_s: float = 5.0,
    ) -> None:
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        self.store = store
        self.queue = _resolve_queue(store, queue)
        self.handler = handler
        self.concurrency = check_int(concurrency, "concurrency", minimum=1, maximum=1024)
        self.batch_size = check_int(
            self.concurrency if batch_size is None else batch_size,
            "batch_size", minimum=self.concurrency, maximum=MAX_BATCH,
        )  # fmt: skip
        self.worker_id = check_identifier(
            default_owner() if worker_id is None else worker_id, "worker_id"
        )
        self.grace_s = check_duration(grace_s, "grace_s", zero_ok=True)
        self.idle_wait_s = check_duration(idle_wait_s, "idle_wait_s", zero_ok=False)
        self._is_async = inspect.iscoroutinefunction(handler)
        self._held: dict[int, _Held] = {}
        self._changed = threading.Condition()
        self._sequence = itertools.count()
        self._counts = {"succeeded": 0, "failed": 0, "released": 0, "lost": 0}
        self._started_at: float | None = None
        self._running = False
        self._hurry = threading.Event()
        self._park_requested = False
        self._woken = False

    # Running

    def run(self, stop: StopSignal) -> None:
        """Work until ``stop`` is set, then shut down gracefully and return.

        Async handlers run on an event loop per handler thread; in asyncio
        code prefer :meth:`run_async`.
        """
        self._begin()
        threads = [
            threading.Thread(target=self._serve, name=f"alkstore-worker-{n}", daemon=True)
            for n in range(self.concurrency)
        ]
        keeper = self._start_keeper()
        for thread in threads:
            thread.start()
        try:
            self._dispatch(stop)
        finally:
            self._shut_down()
            keeper.set()
            self._running = False

    def run_forever(self) -> None:
        """Work until SIGTERM or SIGINT, then shut down gracefully.

        A second signal cuts the grace period short: running jobs are released
        at once.
        """
        with stop_on_signals(on_second=self.hurry) as stop:
            self.run(stop)

    def hurry(self) -> None:
        """End a shutdown's grace period now: running jobs are released at once."""
        self._hurry.set()

    async def run_async(self, stop: asyncio.Event | None = None) -> None:
        """Work in the running event loop until ``stop`` is set or the task is cancelled.

        Coroutine handlers run as tasks, ``concurrency`` at a time; plain
        functions run on the loop's executor. Database calls never block the
        loop: they run on worker threads too.
        """
        stop = asyncio.Event() if stop is None else stop
        self._begin()
        keeper = self._start_keeper()
        tasks: set[asyncio.Task[None]] = set()
        try:
            await self._dispatch_async(stop, tasks)
        finally:
            await self._shut_down_async(tasks)
            keeper.set()
            self._running = False

    def stats(self) -> RunStats:
        """A snapshot of what this worker has done since it started."""
        with self._changed:
            elapsed = 0.0 if self._started_at is None else time.monotonic() - self._started_at
            return RunStats(**self._counts, in_flight=len(self._held), elapsed_s=elapsed)

    def __repr__(self) -> str:
        state = "running" if self._running else "idle"
        return (
            f"<Worker queue={self.queue.name!r} worker_id={self.worker_id!r} "
            f"concurrency={self.concurrency} {state} in_flight={len(self._held)}>"
        )

    # The dispatch loop (threads)

    def _begin(self) -> None:
        if self._running:
            raise RuntimeError(f"{self!r} is already running")
        self._running = True
        self._hurry.clear()
        self._started_at = time.monotonic()

    def _dispatch(self, stop: StopSignal) -> None:
        _start_daemon(self._park_on_request, name="alkstore-parker")
        while not stop.is_set():
            with self._changed:
                while not self._wants_more() and not stop.is_set():
                    self._changed.wait(SIGNAL_CHECK_S)
            if stop.is_set():
                return
            jobs = self._claim(self.batch_size - len(self._held))
            if jobs is None:
                return
            if jobs:
                self._hold(jobs)
            else:
                self._park_until_woken(stop)

    def _park_until_woken(self, stop: StopSignal) -> None:
        """Wait for a queue wake (or the park's timeout) or ``stop``, whichever comes first.

        Every wait here is bounded: in the main thread, a signal handler runs
        only when the wait returns, and ``stop`` may be a plain Event nothing
        notifies this condition of.
        """
        with self._changed:
            self._woken = False
            self._park_requested = True
            self._changed.notify_all()
            while not self._woken and not stop.is_set():
                self._changed.wait(SIGNAL_CHECK_S)

    def _park_on_request(self) -> None:
        # Parking blocks in the engine's queue.wait, which nothing else can
        # interrupt; doing it here keeps the dispatcher free to see ``stop``.
        while True:
            with self._changed:
                while not self._park_requested and self._running:
                    self._changed.wait()
                if not self._running:
                    return
                self._park_requested = False
            self._park()
            with self._changed:
                self._woken = True
                self._changed.notify_all()

    def _serve(self) -> None:
        while True:
            with self._changed:
                held = self._next_unstarted()
                while held is None and self._running:
                    self._changed.wait()
                    held = self._next_unstarted()
                if held is None:
                    return
                held.started = True
            self._execute(held, self._call_sync)

    def _next_unstarted(self) -> _Held | None:
        waiting = [held for held in self._held.values() if not held.started]
        return min(waiting, key=lambda held: held.sequence) if waiting else None

    def _call_sync(self, job: Job) -> None:
        call_to_completion(self.handler, job)

    # The dispatch loop (asyncio)

    async def _dispatch_async(self, stop: asyncio.Event, tasks: set[asyncio.Task[None]]) -> None:
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                room = self.concurrency - len(self._held)
                if room > 0:
                    jobs = await asyncio.to_thread(self._claim, room)
                    if jobs is None:
                        return
                    for held in self._hold(jobs):
                        held.started = True
                        tasks.add(asyncio.ensure_future(self._execute_async(held)))
                    if jobs:
                        continue
                    # Nothing ready: only a wake can bring work, not a finishing task.
                    awaited: set[asyncio.Future[Any]] = {self._park_async(), stopping}
                else:
                    awaited = {*tasks, stopping}
                await asyncio.wait(awaited, return_when=asyncio.FIRST_COMPLETED)
                tasks.difference_update({task for task in tasks if task.done()})
        finally:
            stopping.cancel()

    def _park_async(self) -> asyncio.Future[None]:
        """Park on a daemon thread: unlike the loop's executor, nothing waits for it at exit."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()

        def park() -> None:
            self._park()
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(resolve_future, woken)

        _start_daemon(park, name="alkstore-parker")
        return woken

    async def _execute_async(self, held: _Held) -> None:
        if self._is_async:
            await self._settle_async(held)
        else:
            await asyncio.to_thread(self._execute, held, self._call_sync)

    async def _settle_async(self, held: _Held) -> None:
        job = held.job
        try:
            result = self.handler(job)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            await asyncio.to_thread(self._release, [held])
            raise
        except Exception as exc:
            log.warning("job %s of %r failed", job.id, job.queue, exc_info=True)
            await asyncio.to_thread(self._settle, held, functools.partial(job.retry, exc), "failed")
        else:
            await asyncio.to_thread(self._settle, held, job.ack, "succeeded")

    # Claiming, holding, settling

    def _wants_more(self) -> bool:
        """Claim while a handler thread would idle, or once half the batch is done."""
        held = len(self._held)
        return held < self.concurrency or held <= self.batch_size // 2

    def _claim(self, room: int) -> list[Job] | None:
        """Claim up to ``room`` jobs; None when the store closed."""
        try:
            if room == 1:
                job = self.queue.claim_one(self.worker_id)
                return [] if job is None else [job]
            return self.queue.claim_batch(self.worker_id, room)
        except Closed:
            return None
        except Error:
            log.warning("claiming from %r failed; trying again", self.queue.name, exc_info=True)
            time.sleep(_ERROR_PAUSE_S)
            return []

    def _park(self) -> None:
        try:
            self.queue.wait(self.idle_wait_s)
        except Closed:
            return
        except Error:
            log.warning("waiting on %r failed; trying again", self.queue.name, exc_info=True)
            time.sleep(_ERROR_PAUSE_S)

    def _hold(self, jobs: list[Job]) -> list[_Held]:
        now = time.monotonic()
        fresh = []
        with self._changed:
            for job in jobs:
                # The claim's lease as this host sees it; the heartbeat renews it at a third.
                lease = max(min(job.deadline - time.time(), self._declared_lease()), _MIN_LEASE_S)
                held = _Held(job, lease, now + lease / 3, sequence=next(self._sequence))
                self._held[job.id] = held
                fresh.append(held)
            self._changed.notify_all()
        return fresh

    def _declared_lease(self) -> float:
        return float(self.queue.opts.visibility_timeout_s)

    def _execute(self, held: _Held, call: Callable[[Job], None]) -> None:
        job = held.job
        try:
            call(job)
        except Exception as exc:
            log.warning("job %s of %r failed", job.id, job.queue, exc_info=True)
            self._settle(held, functools.partial(job.retry, exc), "failed")
        except BaseException:
            self._release([held])
            raise
        else:
            self._settle(held, job.ack, "succeeded")

    def _settle(self, held: _Held, settle: Callable[[], bool], outcome: str) -> None:
        try:
            settled = settle()
        except Closed:
            settled = False
        except Error:
            log.warning("settling job %s failed", held.job.id, exc_info=True)
            settled = False
        with self._changed:
            if self._held.pop(held.job.id, None) is not None:
                self._counts[outcome if settled else "lost"] += 1
            self._changed.notify_all()

    def _release(self, holds: list[_Held]) -> None:
        for held in holds:
            try:
                released = held.job.release()
            except Error:
                released = False
            with self._changed:
                if self._held.pop(held.job.id, None) is not None:
                    self._counts["released" if released else "lost"] += 1
                self._changed.notify_all()

    # Heartbeats

    def _start_keeper(self) -> threading.Event:
        done = threading.Event()
        thread = threading.Thread(
            target=self._keep_alive, args=(done,), name="alkstore-heartbeat", daemon=True
        )
        thread.start()
        return done

    def _keep_alive(self, done: threading.Event) -> None:
        while not done.wait(self._beat_interval()):
            now = time.monotonic()
            with self._changed:
                due = [held for held in self._held.values() if held.beat_at <= now]
            for held in due:
                self._beat(held)

    def _beat_interval(self) -> float:
        with self._changed:
            leases = [held.lease_s for held in self._held.values()]
        shortest = min(leases, default=self._declared_lease())
        return min(max(shortest / 6, 0.01), 1.0)

    def _beat(self, held: _Held) -> None:
        try:
            alive = held.job.heartbeat(held.lease_s)
        except Closed:
            return
        except Error:
            log.warning("heartbeat of job %s failed", held.job.id, exc_info=True)
            alive = False
        held.beat_at = time.monotonic() + held.lease_s / 3
        if not alive and not held.heartbeat_failed:
            held.heartbeat_failed = True
            log.warning(
                "job %s of %r lost its claim while running; another worker may run it",
                held.job.id, held.job.queue,
            )  # fmt: skip

    # Shutting down

    def _shut_down(self) -> None:
        self._release(self._unstarted())
        with self._changed:
            self._running = False
            self._changed.notify_all()
        self._await_running()
        self._release(self._all_held())

    def _all_held(self) -> list[_Held]:
        with self._changed:
            return list(self._held.values())

    def _unstarted(self) -> list[_Held]:
        with self._changed:
            waiting = [held for held in self._held.values() if not held.started]
            for held in waiting:
                held.started = True  # no handler thread may pick it up now
            return waiting

    def _await_running(self) -> None:
        deadline = time.monotonic() + self.grace_s
        with self._changed:
            while self._held and not self._hurry.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(min(remaining, 0.1))
        if self._held:
            log.warning("grace period cut short: releasing %d running jobs", len(self._held))

    async def _shut_down_async(self, tasks: set[asyncio.Task[None]]) -> None:
        if tasks:
            await asyncio.wait(tasks, timeout=self.grace_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.to_thread(self._release, self._all_held())


def _start_daemon(target: Callable[..., None], *args: Any, name: str) -> None:
    threading.Thread(target=target, args=args, name=name, daemon=True).start()


def _resolve_queue(store: Store, queue: str | Queue | Outbox) -> Queue:
    if isinstance(queue, Outbox):
        return queue._queue
    if isinstance(queue, Queue):
        if queue._store is not store:
            raise ValueError(f"{queue!r} belongs to another store than {store!r}")
        return queue
    if isinstance(queue, str):
        return store.queue(queue)
    raise TypeError(f"queue must be a name, a Queue or an Outbox, not {type(queue).__name__}")
