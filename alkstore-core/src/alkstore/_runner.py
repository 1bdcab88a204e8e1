"""The scheduler runner's leadership loop, the same for every engine.

The engine supplies two things: how to take (or re-take) the leadership lock,
and how to fire every elapsed boundary — each boundary in one transaction
that first renews the lock (only an unexpired holder can), so a deposed
leader never fires and a long catch-up never outlives the lease.

The loop rides out database outages: a failed call never ends it. A leader
whose call fails may no longer be leader, so it stops firing at once and
campaigns again; as the lock is re-taken by the same owner while it still
holds it, a short outage costs nothing but the pause. Because every boundary
commits alone and is fenced by the lock and by the boundary it advances from,
a commit whose outcome the failure left unknown is never fired twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from alkstore._errors import Closed, Database, LeadershipLost
from alkstore._lock import Lock
from alkstore._names import SCHEDULER_LOCK
from alkstore._receivers import WakeReceiver
from alkstore._running import Outage
from alkstore._store import StopSignal

__all__ = ["run_scheduler"]

log = logging.getLogger("alkstore.scheduler")


def run_scheduler(
    stop: StopSignal,
    *,
    lease_s: float,
    try_lead: Callable[[], Lock | None],
    fire_due: Callable[[Lock], float | None],
    watch_changes: Callable[[], WakeReceiver],
) -> None:
    """Lead or stand by until ``stop`` is set.

    ``try_lead`` acquires ``__alkstore_scheduler`` for ``lease_s`` (None while
    another runner leads); ``fire_due`` fires what is due and returns the next
    fire time (Unix seconds) or None; ``watch_changes`` returns a receiver that
    wakes a leader early when a schedule changes (opened when first needed,
    opened again if it closes, closed on the way out). A standby looks again
    every quarter lease; a leader renews every third of it.

    A :class:`~alkstore.Database` error from any of these calls is an outage,
    never the end: one warning per outage, pauses of up to a few seconds, then
    a leader campaigns again through ``try_lead`` (firing nothing meanwhile).
    Leadership is released on the way out; a release the database fails is
    logged, and the lock lapses by itself after its lease.

    Raises:
        LeadershipLost: the database answered that the leader's lock is gone —
            a renew returned False, or ``fire_due`` found the lock taken.
        Closed: the store was closed.
    """
    outage = Outage(log, "the scheduler")
    changes = _Changes(watch_changes, outage)
    led: Lock | None = None
    try:
        while not stop.is_set():
            try:
                lock = try_lead()
            except Database as exc:
                stop.wait(outage.failed("taking scheduler leadership", exc))
                continue
            outage.succeeded()
            if lock is None:
                stop.wait(lease_s / 4)
                continue
            led = lock
            _lead(stop, lock, fire_due, changes, outage)
    finally:
        changes.close()
        if led is not None:
            _release(led, outage)


def _lead(
    stop: StopSignal,
    lock: Lock,
    fire_due: Callable[[Lock], float | None],
    changes: _Changes,
    outage: Outage,
) -> None:
    """Renew and fire until ``stop``; return after a pause when the database fails."""
    renew_every = lock.ttl_s / 3
    # Renew first: a lock re-taken after an outage keeps the expiry it had,
    # which may be close.
    renew_at = time.monotonic()
    while not stop.is_set():
        action = "renewing scheduler leadership"
        try:
            if time.monotonic() >= renew_at:
                if not lock.renew():
                    raise LeadershipLost(f"{lock.owner!r} failed to renew {SCHEDULER_LOCK!r}")
                renew_at = time.monotonic() + renew_every
            action = "firing due schedules"
            changes.open()  # before reading the schedules: a change after it wakes us
            next_fire_at = fire_due(lock)
        except Database as exc:
            # Whether we still lead is unknown: fire nothing until try_lead says so.
            stop.wait(outage.failed(action, exc))
            return
        outage.succeeded()
        sleep = renew_at - time.monotonic()
        if next_fire_at is not None:
            sleep = min(sleep, next_fire_at - time.time())
        if sleep > 0:
            changes.await_one(stop, sleep)


_STOP_CHECK_S = 0.25
"""The longest a leader waits on schedule changes before looking at ``stop`` again."""


class _Changes:
    """The leader's receiver of schedule changes, (re)opened when needed.

    Opening it is a database call like any other: one that fails (a file
    locked at start, a dead watcher) is part of the outage, and the leader
    then waits by the clock alone.
    """

    def __init__(self, watch: Callable[[], WakeReceiver], outage: Outage) -> None:
        self._watch = watch
        self._outage = outage
        self._receiver: WakeReceiver | None = None

    def await_one(self, stop: StopSignal, seconds: float) -> None:
        """Wait ``seconds``, until a schedule changes or until ``stop`` is set.

        ``stop`` cannot wake the receiver, so the wait goes in short slices.
        """
        receiver = self.open()
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if receiver is None or receiver.closed:
                stop.wait(remaining)  # a closed receiver must not make it spin
                return
            if receiver.recv(min(remaining, _STOP_CHECK_S)) is not None:
                return

    def open(self) -> WakeReceiver | None:
        """The receiver, opened now if need be; None while it cannot be."""
        if self._receiver is not None and not self._receiver.closed:
            return self._receiver
        try:
            self._receiver = self._watch()
        except Database as exc:
            self._outage.failed("watching for schedule changes", exc)
            self._receiver = None
        return self._receiver

    def close(self) -> None:
        if self._receiver is not None:
            self._receiver.close()


def _release(lock: Lock, outage: Outage) -> None:
    """Release leadership, never raising: a lock not released lapses after its lease."""
    if lock._store.closed:
        return
    try:
        lock.release()
    except (Database, Closed) as exc:
        outage.failed(f"releasing {SCHEDULER_LOCK!r} (it lapses within {lock.ttl_s:g} s)", exc)
