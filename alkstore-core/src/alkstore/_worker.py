"""The Worker: claims jobs, runs a handler on each, and settles every claim.

One dispatch loop claims (in batches when work is plentiful) and parks on the
queue's wakes when idle. Handlers run on ``concurrency`` threads, or as
asyncio tasks under :meth:`Worker.run_async`. A keeper thread heartbeats every
held job well before its deadline, so long jobs are never reclaimed while they
run. On stop, jobs not yet started are released at once and running ones get
``grace_s`` to finish before they are released too: nothing is lost, and
nothing stays claimed until its visibility timeout when it could be released.

Leases are durations: the claim's visibility timeout as stamped on its row,
renewed by the server's clock and scheduled by this host's monotonic clock,
so the host's wall clock, however wrong, changes nothing.

A database outage never ends the worker: claims, heartbeats and settles that
fail are retried after capped pauses, with one warning per outage. A handler
raising a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
``KeyboardInterrupt``) stops the worker gracefully, and ``run`` re-raises it;
so does any thread of the worker dying, so a worker never stalls silently.
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
from alkstore._job import Job, describe_error
from alkstore._names import check_identifier
from alkstore._options import check_duration, check_int
from alkstore._outage import Outage
from alkstore._outbox import Outbox
from alkstore._queue import MAX_BATCH, Queue
from alkstore._receivers import resolve_future
from alkstore._run_stats import RunStats, call_to_completion
from alkstore._signals import SIGNAL_CHECK_S, stop_on_signals
from alkstore._store import StopSignal, Store, default_owner

__all__ = ["Handler", "Worker"]

log = logging.getLogger("alkstore.worker")

Handler = Callable[[Job], object | Awaitable[object]]
"""Called with each claimed :class:`Job`; may be a coroutine function.

Returning acks the job; raising an ``Exception`` retries it on the backoff
curve (dead letters after its last attempt), recording ``Type: message``.
Raising any other ``BaseException`` stops the worker, which re-raises it.
"""


@dataclass(eq=False)
class _Held:
    """A claim the worker holds; times are ``time.monotonic()`` readings."""

    job: Job
    lease_s: float
    beat_at: float
    """When it next needs a heartbeat."""
    lapses_at: float
    """When the claim lapses at the earliest, unless renewed."""
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
        self._outage = Outage(log, f"worker {self.worker_id!r} on {self.queue.name!r}")
        self._aborted: BaseException | None = None
        """What stops the worker from inside: a handler's BaseException, a thread's death."""
        self._halt_async: Callable[[], None] | None = None

    # Running

    def run(self, stop: StopSignal) -> None:
        """Work until ``stop`` is set, then shut down gracefully and return.

        Async handlers run on an event loop per handler thread; in asyncio
        code prefer :meth:`run_async`.

        Raises:
            BaseException: a handler raised one that is not an ``Exception``
                (``SystemExit``, ``KeyboardInterrupt``), or a thread of the
                worker died. The worker first shut down as if stopped: its job
                released, other running jobs given ``grace_s``, nothing held.
        """
        self._begin()
        serve = self._guarded(self._serve, "handler thread")
        threads = [
            threading.Thread(target=serve, name=f"alkstore-worker-{n}", daemon=True)
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
        self._raise_if_aborted()

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

        Raises:
            BaseException: as :meth:`run` does, after the same shutdown.
        """
        stop = asyncio.Event() if stop is None else stop
        self._begin()
        halted = asyncio.Event()
        loop = asyncio.get_running_loop()

        def halt() -> None:
            loop.call_soon_threadsafe(halted.set)

        self._halt_async = halt
        keeper = self._start_keeper()
        tasks: set[asyncio.Task[None]] = set()
        try:
            await self._dispatch_async(stop, halted, tasks)
        finally:
            await self._shut_down_async(tasks)
            keeper.set()
            self._running = False
            self._halt_async = None
        self._raise_if_aborted()

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
        self._aborted = None
        self._hurry.clear()
        self._started_at = time.monotonic()

    def _halting(self, stop: StopSignal) -> bool:
        return stop.is_set() or self._aborted is not None

    def _dispatch(self, stop: StopSignal) -> None:
        parker = self._guarded(self._park_on_request, "parking thread")
        _start_daemon(parker, name="alkstore-parker")
        while not self._halting(stop):
            with self._changed:
                while not self._wants_more() and not self._halting(stop):
                    self._changed.wait(SIGNAL_CHECK_S)
            if self._halting(stop):
                return
            claiming_at = time.monotonic()
            try:
                jobs = self._claim(self.batch_size - len(self._held))
            except Error as exc:
                self._pause(stop, self._outage.failed(f"claiming from {self.queue.name!r}", exc))
                continue
            if jobs is None:
                return
            if jobs:
                self._hold(jobs, claiming_at)
            else:
                self._park_until_woken(stop)

    def _pause(self, stop: StopSignal, seconds: float) -> None:
        """Wait ``seconds``, or less if the worker is told to stop."""
        deadline = time.monotonic() + seconds
        with self._changed:
            while not self._halting(stop):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(min(remaining, SIGNAL_CHECK_S))

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
            while not self._woken and not self._halting(stop):
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
                while held is None and self._running and self._aborted is None:
                    self._changed.wait()
                    held = self._next_unstarted()
                if held is None or self._aborted is not None:
                    return  # an unstarted job is the shutdown's to release
                held.started = True
            self._execute(held, self._call_sync)

    def _next_unstarted(self) -> _Held | None:
        waiting = [held for held in self._held.values() if not held.started]
        return min(waiting, key=lambda held: held.sequence) if waiting else None

    def _call_sync(self, job: Job) -> None:
        call_to_completion(self.handler, job)

    # The dispatch loop (asyncio)

    async def _dispatch_async(
        self, stop: asyncio.Event, halted: asyncio.Event, tasks: set[asyncio.Task[None]]
    ) -> None:
        stopping = asyncio.ensure_future(_first_set(stop, halted))
        try:
            while not stop.is_set() and not halted.is_set():
                room = self.concurrency - len(self._held)
                if room > 0:
                    claiming_at = time.monotonic()
                    try:
                        jobs = await asyncio.to_thread(self._claim, room)
                    except Error as exc:
                        claiming = f"claiming from {self.queue.name!r}"
                        await asyncio.wait({stopping}, timeout=self._outage.failed(claiming, exc))
                        continue
                    if jobs is None:
                        return
                    for held in self._hold(jobs, claiming_at):
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
            try:
                self._park()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(resolve_future, woken)

        _start_daemon(self._guarded(park, "parking thread"), name="alkstore-parker")
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
        except BaseException as exc:
            self._abort_by_handler(job, exc)  # first: no claim may take the job back meanwhile
            await asyncio.to_thread(self._release, [held])
        else:
            await asyncio.to_thread(self._settle, held, job.ack, "succeeded")

    # Claiming, holding, settling

    def _wants_more(self) -> bool:
        """Claim while a handler thread would idle, or once half the batch is done."""
        held = len(self._held)
        return held < self.concurrency or held <= self.batch_size // 2

    def _claim(self, room: int) -> list[Job] | None:
        """Claim up to ``room`` jobs; None when the store closed.

        Raises:
            Error: the database failed (the caller pauses and tries again).
        """
        try:
            if room == 1:
                job = self.queue.claim_one(self.worker_id)
                jobs = [] if job is None else [job]
            else:
                jobs = self.queue.claim_batch(self.worker_id, room)
        except Closed:
            return None
        self._outage.succeeded()
        return jobs

    def _park(self) -> None:
        try:
            self.queue.wait(self.idle_wait_s)
        except Closed:
            return
        except Error as exc:
            time.sleep(self._outage.failed(f"waiting on {self.queue.name!r}", exc))

    def _hold(self, jobs: list[Job], claimed_at: float) -> list[_Held]:
        """Hold freshly claimed jobs; ``claimed_at`` is the monotonic time the claim was sent."""
        fresh = []
        with self._changed:
            for job in jobs:
                lease = self._lease(job)
                held = _Held(
                    job, lease, beat_at=claimed_at + lease / 3, lapses_at=claimed_at + lease,
                    sequence=next(self._sequence),
                )  # fmt: skip
                self._held[job.id] = held
                fresh.append(held)
            self._changed.notify_all()
        return fresh

    def _lease(self, job: Job) -> float:
        """The claim's lease: a duration from the job's row, never from the host's clock."""
        if job.visibility_timeout_s is not None:
            return job.visibility_timeout_s
        return float(self.queue.opts.visibility_timeout_s)

    def _execute(self, held: _Held, call: Callable[[Job], None]) -> None:
        job = held.job
        try:
            call(job)
        except Exception as exc:
            log.warning("job %s of %r failed", job.id, job.queue, exc_info=True)
            self._settle(held, functools.partial(job.retry, exc), "failed")
        except BaseException as exc:
            self._abort_by_handler(job, exc)  # first: no claim may take the job back meanwhile
            self._release([held])
        else:
            self._settle(held, job.ack, "succeeded")

    def _settle(self, held: _Held, settle: Callable[[], bool], outcome: str) -> None:
        settled = False
        try:
            settled = self._settled(held, settle)
        finally:
            with self._changed:
                if self._held.pop(held.job.id, None) is not None:
                    self._counts[outcome if settled else "lost"] += 1
                self._changed.notify_all()

    def _settled(self, held: _Held, settle: Callable[[], bool]) -> bool:
        """Settle the claim, retrying through an outage while it may still hold.

        Settles are fenced, so retrying one whose outcome is unknown is safe.
        A claim that lapses meanwhile is claimed and run again (at least once).
        """
        while True:
            try:
                settled = settle()
            except Closed:
                return False
            except Error as exc:
                pause = self._outage.failed(f"settling job {held.job.id}", exc)
                if time.monotonic() + pause >= held.lapses_at or not self._holds(held):
                    return False
                time.sleep(pause)
                continue
            self._outage.succeeded()
            return settled

    def _holds(self, held: _Held) -> bool:
        with self._changed:
            return self._held.get(held.job.id) is held

    def _release(self, holds: list[_Held]) -> None:
        for held in holds:
            try:
                released = held.job.release()
            except Closed:
                released = False
            except Error as exc:
                # The claim lapses by itself at its deadline; the job is then claimed again.
                self._outage.failed(f"releasing job {held.job.id}", exc)
                released = False
            with self._changed:
                if self._held.pop(held.job.id, None) is not None:
                    self._counts["released" if released else "lost"] += 1
                self._changed.notify_all()

    # Heartbeats

    def _start_keeper(self) -> threading.Event:
        done = threading.Event()
        thread = threading.Thread(
            target=self._guarded(functools.partial(self._keep_alive, done), "heartbeat thread"),
            name="alkstore-heartbeat", daemon=True,
        )  # fmt: skip
        thread.start()
        return done

    def _keep_alive(self, done: threading.Event) -> None:
        """Heartbeat each held job a third of a lease after its claim or last renewal."""
        while not done.wait(self._beat_interval()):
            now = time.monotonic()
            with self._changed:
                due = [held for held in self._held.values() if held.beat_at <= now]
            for held in due:
                self._beat(held)

    def _beat_interval(self) -> float:
        with self._changed:
            leases = [held.lease_s for held in self._held.values()]
        shortest = min(leases, default=float(self.queue.opts.visibility_timeout_s))
        return min(max(shortest / 6, 0.01), 1.0)

    def _beat(self, held: _Held) -> None:
        sent_at = time.monotonic()
        try:
            alive = held.job.heartbeat(held.lease_s)
        except Closed:
            return
        except Error as exc:
            # Not lost yet: the claim holds until its deadline. Try again soon.
            pause = self._outage.failed(f"heartbeating job {held.job.id}", exc)
            held.beat_at = time.monotonic() + min(pause, held.lease_s / 3)
            return
        self._outage.succeeded()
        held.beat_at = sent_at + held.lease_s / 3
        if alive:
            held.lapses_at = sent_at + held.lease_s
        elif not held.heartbeat_failed:
            held.heartbeat_failed = True
            log.warning(
                "job %s of %r lost its claim while running; another worker may run it",
                held.job.id, held.job.queue,
            )  # fmt: skip

    # Stopping from inside

    def _abort_by_handler(self, job: Job, error: BaseException) -> None:
        log.error(
            "job %s of %r: the handler raised %s; the worker stops and releases its claims",
            job.id, job.queue, describe_error(error),
        )  # fmt: skip
        self._abort(error)

    def _abort(self, error: BaseException) -> None:
        """Stop the worker; ``run`` re-raises ``error`` once it has shut down."""
        with self._changed:
            if self._aborted is None:
                self._aborted = error
            self._changed.notify_all()
        halt = self._halt_async
        if halt is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                halt()

    def _guarded(self, target: Callable[[], None], role: str) -> Callable[[], None]:
        """``target`` for a thread of the worker: its death stops the worker, loudly."""

        def run() -> None:
            try:
                target()
            except BaseException as exc:
                log.error("the worker's %s died; the worker stops", role, exc_info=True)
                self._abort(exc)

        return run

    def _raise_if_aborted(self) -> None:
        error, self._aborted = self._aborted, None
        if error is not None:
            raise error

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


async def _first_set(*events: asyncio.Event) -> None:
    """Return once any of ``events`` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


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
