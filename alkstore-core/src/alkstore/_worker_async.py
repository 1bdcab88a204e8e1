"""``Worker.run_async``: the worker as asyncio tasks, over either kind of store.

The dispatcher claims and starts a task per held job, ``concurrency`` at a
time (a plain handler runs on the run's ``HandlerThreads``); a keeper task
heartbeats; an idle dispatcher parks on the queue's wakes as a task of its
own, so ``stop`` and finishing handlers are seen at once.
What the worker does is decided by the ledger (``_worker_ledger``) exactly as
on threads; only the database calls differ, behind a :class:`QueuePort`:

- :class:`AsyncQueuePort`, over an :class:`~alkstore.AsyncQueue`, awaits the
  async API: with coroutine handlers, no thread of the worker's own, none per claim.
- :class:`OffloadedQueuePort`, over a sync :class:`~alkstore.Queue`, runs each
  call on a thread (a park on a daemon thread: nothing waits for it at exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

from alkstore._async_job import AsyncJob
from alkstore._async_queue import AsyncQueue
from alkstore._despite_cancel import OUTCOME_WAIT_S, outcome_despite_cancel
from alkstore._errors import Closed, Error
from alkstore._handler_shapes import check_result, is_coroutine_handler
from alkstore._handler_threads import HandlerThreads, complete_from_thread
from alkstore._job import ClaimedJob, Job
from alkstore._parking import AsyncParking, Parking
from alkstore._queue import Queue
from alkstore._run_stats import call_to_completion
from alkstore._tracing import handling
from alkstore._worker_ledger import (
    BEAT_ROUND,
    FAILED,
    LOST,
    RELEASED,
    SUCCEEDED,
    Held,
    Ledger,
    Verdict,
)

__all__ = ["AsyncQueuePort", "AsyncRunner", "OffloadedQueuePort", "QueuePort"]

T = TypeVar("T")


class QueuePort(Protocol):
    """The database calls of a worker's asyncio run: each may raise ``Error``
    (``Closed`` once the store closed)."""

    async def claim(self, n: int) -> list[ClaimedJob[Any]]: ...
    async def wait(self, timeout: float) -> None: ...
    async def ack(self, job: ClaimedJob[Any]) -> bool: ...
    async def retry(self, job: ClaimedJob[Any], error: BaseException) -> bool: ...
    async def release(self, job: ClaimedJob[Any]) -> bool: ...
    async def heartbeat(self, job: ClaimedJob[Any], extend_s: float) -> bool: ...
    async def exists(self, job: ClaimedJob[Any]) -> bool: ...
    def close(self) -> None: ...


class AsyncQueuePort:
    """An :class:`~alkstore.AsyncQueue`'s public async API."""

    def __init__(self, queue: AsyncQueue, worker_id: str) -> None:
        self._queue = queue
        self._worker_id = worker_id
        self._parking = AsyncParking(queue)

    async def claim(self, n: int) -> list[ClaimedJob[Any]]:
        if n == 1:
            job = await self._queue.claim_one(self._worker_id)
            return [] if job is None else [job]
        return list(await self._queue.claim_batch(self._worker_id, n))

    async def wait(self, timeout: float) -> None:
        await self._parking.wait(timeout)

    async def ack(self, job: ClaimedJob[Any]) -> bool:
        return await _async(job).ack()

    async def retry(self, job: ClaimedJob[Any], error: BaseException) -> bool:
        return await _async(job).retry(error)

    async def release(self, job: ClaimedJob[Any]) -> bool:
        return await _async(job).release()

    async def heartbeat(self, job: ClaimedJob[Any], extend_s: float) -> bool:
        return await _async(job).heartbeat(extend_s)

    async def exists(self, job: ClaimedJob[Any]) -> bool:
        return await self._queue.get_job(job.id) is not None

    def close(self) -> None:
        self._parking.close()


class OffloadedQueuePort:
    """A sync :class:`~alkstore.Queue`'s calls, each on a thread."""

    def __init__(self, queue: Queue, worker_id: str) -> None:
        self._queue = queue
        self._worker_id = worker_id
        self._parking = Parking(queue)

    async def claim(self, n: int) -> list[ClaimedJob[Any]]:
        if n == 1:
            job = await asyncio.to_thread(self._queue.claim_one, self._worker_id)
            return [] if job is None else [job]
        return list(await asyncio.to_thread(self._queue.claim_batch, self._worker_id, n))

    async def wait(self, timeout: float) -> None:
        # On a daemon thread: unlike the loop's executor, nothing waits for it at exit.
        loop = asyncio.get_running_loop()
        parked: asyncio.Future[None] = loop.create_future()

        def park() -> None:
            try:
                self._parking.wait(timeout)
            except Exception as exc:
                complete_from_thread(loop, parked, None, exc)
            else:
                complete_from_thread(loop, parked, None, None)

        threading.Thread(target=park, name="alkstore-parker", daemon=True).start()
        await parked

    async def ack(self, job: ClaimedJob[Any]) -> bool:
        return await asyncio.to_thread(_sync(job).ack)

    async def retry(self, job: ClaimedJob[Any], error: BaseException) -> bool:
        return await asyncio.to_thread(_sync(job).retry, error)

    async def release(self, job: ClaimedJob[Any]) -> bool:
        return await asyncio.to_thread(_sync(job).release)

    async def heartbeat(self, job: ClaimedJob[Any], extend_s: float) -> bool:
        return await asyncio.to_thread(_sync(job).heartbeat, extend_s)

    async def exists(self, job: ClaimedJob[Any]) -> bool:
        return await asyncio.to_thread(self._queue.get_job, job.id) is not None

    def close(self) -> None:
        self._parking.close()


class AsyncRunner:
    """One asyncio run of a worker; ``run`` returns once every claim is settled or released."""

    def __init__(
        self,
        ledger: Ledger,
        port: QueuePort,
        handler: Callable[[Any], object],
        *,
        grace_s: float,
        idle_wait_s: float,
    ) -> None:
        self._ledger = ledger
        self._port = port
        self._handler = handler
        self._is_async = is_coroutine_handler(handler)
        self._grace_s = grace_s
        self._idle_wait_s = idle_wait_s
        self._changed = asyncio.Event()
        """Set whenever the dispatcher may have something to do: it looks at everything again."""
        self._halting = asyncio.Event()
        """Set once ``stop`` is set or the worker aborts."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._cutting_short = False
        """The shutdown is cancelling the handler tasks (Python 3.10 cannot ask a task)."""
        self._handler_threads = HandlerThreads(ledger.concurrency, "alkstore-handler")
        """Where plain handlers run (daemon threads: one stuck past shutdown holds nothing up)."""

    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set, the worker aborts, or this await is cancelled
        (then running handlers are cancelled at once: no grace)."""
        loop = asyncio.get_running_loop()
        self._ledger.on_change(lambda: _call_soon(loop, self._on_abort_or_hurry))
        if stop.is_set() or self._ledger.aborted is not None:
            self._halting.set()
        relay = asyncio.ensure_future(self._relay(stop))
        keeper = asyncio.ensure_future(self._guarded(self._keep_alive(), "heartbeat task"))
        hurried = False
        try:
            await self._dispatch()
        except asyncio.CancelledError:
            hurried = True
            raise
        finally:
            try:
                await self._shut_down(hurried)
            finally:
                for helper in (relay, keeper):
                    helper.cancel()
                await asyncio.gather(relay, keeper, return_exceptions=True)
                self._ledger.on_change(None)
                self._handler_threads.close()
                self._port.close()

    def _on_abort_or_hurry(self) -> None:
        if self._ledger.aborted is not None:
            self._halting.set()
        self._changed.set()

    async def _relay(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._halting.set()
        self._changed.set()

    async def _guarded(self, work: Awaitable[None], role: str) -> None:
        """Await ``work``, a helper task of the run: its death stops the worker, loudly."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._ledger.helper_died(role, exc)

    # Dispatching

    async def _dispatch(self) -> None:
        parking: asyncio.Task[None] | None = None
        try:
            while not self._halting.is_set():
                self._start_handlers()
                if parking is None and (room := self._ledger.claim_room()):
                    claiming_at = time.monotonic()
                    try:
                        jobs = await self._claim(room, claiming_at)
                    except Closed:
                        return
                    except Error as exc:
                        await self._pause(self._ledger.claim_failed(exc))
                        continue
                    self._ledger.answered()
                    if jobs:
                        self._ledger.hold(jobs, claiming_at)
                        continue
                    # Nothing ready: only a wake can bring work, not a finishing handler.
                    parking = asyncio.ensure_future(self._port.wait(self._idle_wait_s))
                    parking.add_done_callback(lambda _: self._changed.set())
                await self._changed.wait()
                self._changed.clear()
                if parking is not None and parking.done():
                    parked, parking = parking, None
                    if not await self._parked(parked):
                        return
        finally:
            if parking is not None:
                parking.cancel()
                await asyncio.gather(parking, return_exceptions=True)

    async def _claim(self, room: int, claiming_at: float) -> list[ClaimedJob[Any]]:
        """Claim up to ``room`` jobs. Cancelled meanwhile, wait for the claim's
        outcome and hold what it took, so that the shutdown releases it."""
        claiming = asyncio.ensure_future(self._port.claim(room))
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:
            jobs = await outcome_despite_cancel(claiming, OUTCOME_WAIT_S)
            if jobs:
                self._ledger.hold(jobs, claiming_at)
            raise

    async def _parked(self, parked: asyncio.Task[None]) -> bool:
        """Look at how a park ended; False once the store closed."""
        if parked.cancelled():  # not by the dispatcher: as good as a wake
            return True
        error = parked.exception()
        if isinstance(error, Closed):
            return False
        if isinstance(error, Error):
            await self._pause(self._ledger.park_failed(error))
        elif error is not None:
            raise error
        return True

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the worker is told to stop."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._halting.wait(), seconds)

    def _start_handlers(self) -> None:
        """Start a handler task for held jobs not yet started, up to ``concurrency`` running."""
        while len(self._tasks) < self._ledger.concurrency:
            held = self._ledger.next_unstarted()
            if held is None:
                return
            task = asyncio.ensure_future(self._guarded(self._execute(held), "handler task"))
            self._tasks.add(task)
            task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._changed.set()

    # Handling

    async def _execute(self, held: Held) -> None:
        self._ledger.starting(held)
        error: BaseException | None = None
        try:
            await self._call(held.job)
        except asyncio.CancelledError as exc:
            if self._stopping_this_task():
                await self._release([held])
                raise
            error = exc  # the handler's own: something it awaited was cancelled
        except BaseException as exc:
            error = exc
        verdict = self._ledger.judge(held, error)
        if verdict is Verdict.ACK:
            await self._settle(held, SUCCEEDED)
        elif verdict is Verdict.RETRY:
            assert error is not None
            await self._settle(held, FAILED, error)
        else:
            await self._release([held])

    async def _call(self, job: ClaimedJob[Any]) -> None:
        if not self._is_async:
            await self._handler_threads.run(functools.partial(_handled, self._handler, job))
            return
        with handling(job):
            result = self._handler(job)
            check_result(result)
            if inspect.isawaitable(result):
                await result

    def _stopping_this_task(self) -> bool:
        """Whether the running handler task is being cancelled from outside (by the
        shutdown, or by whoever cancels every task), rather than its handler
        having raised a CancelledError of its own."""
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+
        if cancelling is not None and cancelling() > 0:
            return True
        return self._cutting_short

    async def _settle(self, held: Held, outcome: str, error: BaseException | None = None) -> None:
        """Settle ``held``'s job. Cancelled meanwhile (a hurried shutdown), the
        settle already sent is waited for: its outcome, not the cancellation,
        says whether the job is done."""
        settled = False
        settling = asyncio.ensure_future(self._settled(held, error))
        try:
            settled = await asyncio.shield(settling)
        except asyncio.CancelledError:
            settled = bool(await outcome_despite_cancel(settling, OUTCOME_WAIT_S))
            raise
        finally:
            self._ledger.drop(held, outcome if settled else LOST)

    async def _settled(self, held: Held, error: BaseException | None) -> bool:
        """Ack (or retry, after ``error``), riding out an outage while the claim may hold."""
        while True:
            try:
                if error is None:
                    settled = await self._port.ack(held.job)
                else:
                    settled = await self._port.retry(held.job, error)
            except Closed:
                return False
            except Error as exc:
                pause = self._ledger.settle_failed(held, exc)
                if pause is None:
                    return False
                await asyncio.sleep(pause)
                continue
            self._ledger.answered()
            return settled or (error is None and held.settle_unknown and await self._gone(held))

    async def _gone(self, held: Held) -> bool:
        """Whether ``held``'s job is no longer in the queue: an ack whose answer
        was lost committed (or another's did), rather than the claim being lost."""
        try:
            return not await self._port.exists(held.job)
        except Error:
            return False

    async def _release(self, holds: list[Held]) -> None:
        for held in holds:
            released = False
            try:
                released = await self._port.release(held.job)
            except Closed:
                pass
            except Error as exc:
                self._ledger.release_failed(held, exc)
            finally:
                self._ledger.drop(held, RELEASED if released else LOST)

    # Heartbeats

    async def _keep_alive(self) -> None:
        """Heartbeat each held job a third of a lease after its claim or last renewal."""
        while True:
            await asyncio.sleep(self._ledger.beat_interval())
            more = True
            while more and (due := self._ledger.due_for_beat()):
                for held in due:
                    if not await self._beat(held):
                        return  # the store closed
                more = len(due) == BEAT_ROUND  # a full round: others may be due still

    async def _beat(self, held: Held) -> bool:
        """Heartbeat ``held``'s claim; False once the store closed."""
        sent_at = time.monotonic()
        try:
            alive = await self._port.heartbeat(held.job, held.lease_s)
        except Closed:
            return False
        except Error as exc:
            self._ledger.beat_failed(held, exc)
            return True
        self._ledger.beat_answered(held, sent_at, alive)
        return True

    # Shutting down

    async def _shut_down(self, hurried: bool) -> None:
        """Release jobs not yet started at once, give running ones ``grace_s``
        (none when ``hurried``), then cancel them: each releases its job."""
        await self._release(self._ledger.take_unstarted())
        running = set(self._tasks)
        if running and not hurried:
            await self._await_running()
        self._ledger.note_cut_short()
        running = set(self._tasks)
        self._cutting_short = True
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self._release(self._ledger.all_held())

    async def _await_running(self) -> None:
        deadline = time.monotonic() + self._grace_s
        while self._tasks and not self._ledger.hurried.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)


def _handled(handler: Callable[[Any], object], job: ClaimedJob[Any]) -> None:
    """A plain handler's call, on its thread, in the job's span.

    A ``GeneratorExit`` it raises comes back as a ``RuntimeError``: raised out
    of the awaiting coroutine, it would be taken for that coroutine's closing.
    """
    with handling(job):
        try:
            call_to_completion(handler, job)
        except GeneratorExit as exc:
            raise RuntimeError("the handler raised GeneratorExit") from exc


def _async(job: ClaimedJob[Any]) -> AsyncJob:
    return cast(AsyncJob, job)


def _sync(job: ClaimedJob[Any]) -> Job:
    return cast(Job, job)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(callback)
