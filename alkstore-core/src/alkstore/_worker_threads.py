"""``Worker.run``: the worker on threads, over a sync :class:`~alkstore.Store`.

One dispatch thread (the caller's) claims, in batches when work is plentiful,
and parks on the queue's wakes when idle; ``concurrency`` handler threads run
the handlers; a keeper thread heartbeats every held job well before its
deadline; a parking thread blocks in the queue's wait (on a subscription kept
for the run, ``_parking``) so the dispatcher stays free to see ``stop``. The
decisions are the ledger's (``_worker_ledger``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from alkstore._errors import Closed, Error
from alkstore._job import Job
from alkstore._parking import Parking
from alkstore._run_stats import call_to_completion
from alkstore._signals import SIGNAL_CHECK_S
from alkstore._store import StopSignal
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

if TYPE_CHECKING:
    from alkstore._queue import Queue

__all__ = ["ThreadRunner"]


class ThreadRunner:
    """One run of a worker on threads; ``run`` returns once every claim is settled or released."""

    def __init__(
        self,
        ledger: Ledger,
        queue: Queue,
        worker_id: str,
        handler: Callable[[Job], object],
        *,
        grace_s: float,
        idle_wait_s: float,
    ) -> None:
        self._ledger = ledger
        self._queue = queue
        self._worker_id = worker_id
        self._handler = handler
        self._grace_s = grace_s
        self._idle_wait_s = idle_wait_s
        self._parking = Parking(queue)
        self._running = True
        self._park_requested = False
        self._woken = False

    def run(self, stop: StopSignal) -> None:
        serve = self._ledger.guarded(self._serve, "handler thread")
        for n in range(self._ledger.concurrency):
            _start_daemon(serve, name=f"alkstore-worker-{n}")
        keeper_done = threading.Event()
        keep_alive = functools.partial(self._keep_alive, keeper_done)
        _start_daemon(self._ledger.guarded(keep_alive, "heartbeat thread"), "alkstore-heartbeat")
        try:
            self._dispatch(stop)
        finally:
            self._shut_down()
            keeper_done.set()

    # Dispatching

    def _halting(self, stop: StopSignal) -> bool:
        return stop.is_set() or self._ledger.aborted is not None

    def _dispatch(self, stop: StopSignal) -> None:
        parker = self._ledger.guarded(self._park_on_request, "parking thread")
        _start_daemon(parker, name="alkstore-parker")
        changed = self._ledger.changed
        while not self._halting(stop):
            with changed:
                while not (room := self._ledger.claim_room()) and not self._halting(stop):
                    changed.wait(SIGNAL_CHECK_S)
            if self._halting(stop):
                return
            claiming_at = time.monotonic()
            try:
                jobs = self._claim(room)
            except Closed:
                return
            except Error as exc:
                self._pause(stop, self._ledger.claim_failed(exc))
                continue
            self._ledger.answered()
            if jobs:
                self._ledger.hold(list(jobs), claiming_at)
            else:
                self._park_until_woken(stop)

    def _claim(self, room: int) -> list[Job]:
        if room == 1:
            job = self._queue.claim_one(self._worker_id)
            return [] if job is None else [job]
        return self._queue.claim_batch(self._worker_id, room)

    def _pause(self, stop: StopSignal, seconds: float) -> None:
        """Wait ``seconds``, or less if the worker is told to stop."""
        deadline = time.monotonic() + seconds
        with self._ledger.changed:
            while not self._halting(stop):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._ledger.changed.wait(min(remaining, SIGNAL_CHECK_S))

    def _park_until_woken(self, stop: StopSignal) -> None:
        """Wait for a queue wake (or the park's timeout) or ``stop``, whichever comes first.

        Every wait here is bounded: in the main thread, a signal handler runs
        only when the wait returns, and ``stop`` may be a plain Event nothing
        notifies this condition of.
        """
        changed = self._ledger.changed
        with changed:
            self._woken = False
            self._park_requested = True
            changed.notify_all()
            while not self._woken and not self._halting(stop):
                changed.wait(SIGNAL_CHECK_S)

    def _park_on_request(self) -> None:
        # Parking blocks in the engine's queue.wait, which nothing else can
        # interrupt; doing it here keeps the dispatcher free to see ``stop``.
        changed = self._ledger.changed
        while True:
            with changed:
                while not self._park_requested and self._running:
                    changed.wait()
                if not self._running:
                    return
                self._park_requested = False
            self._park()
            with changed:
                self._woken = True
                changed.notify_all()

    def _park(self) -> None:
        try:
            self._parking.wait(self._idle_wait_s)
        except Closed:
            return
        except Error as exc:
            time.sleep(self._ledger.park_failed(exc))

    # Handling

    def _serve(self) -> None:
        changed = self._ledger.changed
        while True:
            with changed:
                while True:
                    if self._ledger.aborted is not None:
                        return  # an unstarted job is the shutdown's to release
                    held = self._ledger.next_unstarted()
                    if held is not None:
                        break
                    if not self._running:
                        return
                    changed.wait()
            self._execute(held)

    def _execute(self, held: Held) -> None:
        job = cast(Job, held.job)
        self._ledger.starting(held)
        try:
            with handling(job):
                call_to_completion(self._handler, job)
        except BaseException as exc:
            verdict = self._ledger.judge(held, exc)
            error: BaseException | None = exc
        else:
            verdict, error = self._ledger.judge(held, None), None
        if verdict is Verdict.ACK:
            self._settle(held, job.ack, SUCCEEDED)
        elif verdict is Verdict.RETRY:
            assert error is not None
            self._settle(held, functools.partial(job.retry, error), FAILED)
        else:
            self._release([held])

    def _settle(self, held: Held, settle: Callable[[], bool], outcome: str) -> None:
        settled = False
        try:
            settled = self._settled(held, settle) or (
                outcome == SUCCEEDED and held.settle_unknown and self._gone(held)
            )
        finally:
            self._ledger.drop(held, outcome if settled else LOST)

    def _settled(self, held: Held, settle: Callable[[], bool]) -> bool:
        """Settle the claim, retrying through an outage while it may still hold."""
        while True:
            try:
                settled = settle()
            except Closed:
                return False
            except Error as exc:
                pause = self._ledger.settle_failed(held, exc)
                if pause is None:
                    return False
                time.sleep(pause)
                continue
            self._ledger.answered()
            return settled

    def _gone(self, held: Held) -> bool:
        """Whether ``held``'s job is no longer in the queue: an ack whose answer
        was lost committed (or another's did), rather than the claim being lost."""
        try:
            return self._queue.get_job(held.job.id) is None
        except Error:
            return False

    def _release(self, holds: list[Held]) -> None:
        for held in holds:
            job = cast(Job, held.job)
            released = False
            try:
                released = job.release()
            except Closed:
                pass
            except Error as exc:
                self._ledger.release_failed(held, exc)
            self._ledger.drop(held, RELEASED if released else LOST)

    # Heartbeats

    def _keep_alive(self, done: threading.Event) -> None:
        """Heartbeat each held job a third of a lease after its claim or last renewal."""
        while not done.wait(self._ledger.beat_interval()):
            more = True
            while more and (due := self._ledger.due_for_beat()):
                if not all(self._beat(held) for held in due):
                    return  # the store closed
                more = len(due) == BEAT_ROUND  # a full round: others may be due still

    def _beat(self, held: Held) -> bool:
        """Heartbeat ``held``'s claim; False once the store closed."""
        job = cast(Job, held.job)
        sent_at = time.monotonic()
        try:
            alive = job.heartbeat(held.lease_s)
        except Closed:
            return False
        except Error as exc:
            self._ledger.beat_failed(held, exc)
            return True
        self._ledger.beat_answered(held, sent_at, alive)
        return True

    # Shutting down

    def _shut_down(self) -> None:
        """Release jobs not yet started at once, give running ones ``grace_s``, then release."""
        self._release(self._ledger.take_unstarted())
        with self._ledger.changed:
            self._running = False
            self._ledger.changed.notify_all()
        self._parking.close()
        self._await_running()
        self._release(self._ledger.all_held())

    def _await_running(self) -> None:
        deadline = time.monotonic() + self._grace_s
        changed = self._ledger.changed
        with changed:
            while self._ledger.in_flight() and not self._ledger.hurried.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                changed.wait(min(remaining, 0.1))
        self._ledger.note_cut_short()


def _start_daemon(target: Callable[[], None], name: str) -> None:
    threading.Thread(target=target, name=name, daemon=True).start()
