"""The scheduler runner's leadership loop, the same for every engine.

The engine supplies two things: how to take (or re-take) the leadership lock,
and how to fire every elapsed boundary — each boundary in one transaction
that first checks the lock is still held, so a deposed leader never fires.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from alkstore._errors import LeadershipLost
from alkstore._lock import Lock
from alkstore._names import SCHEDULER_LOCK
from alkstore._receivers import WakeReceiver
from alkstore._store import StopSignal

__all__ = ["run_scheduler"]


def run_scheduler(
    stop: StopSignal,
    *,
    lease_s: float,
    try_lead: Callable[[], Lock | None],
    fire_due: Callable[[Lock], float | None],
    changes: WakeReceiver,
) -> None:
    """Lead or stand by until ``stop`` is set.

    ``try_lead`` acquires ``__alkstore_scheduler`` for ``lease_s`` (None while
    another runner leads); ``fire_due`` fires what is due and returns the next
    fire time (Unix seconds) or None; ``changes`` wakes a leader early when a
    schedule changes. A standby looks again every quarter lease; a leader
    renews every third of it.

    Raises:
        LeadershipLost: the leader failed to renew, or ``fire_due`` found the
            lock taken.
    """
    while not stop.is_set():
        lock = try_lead()
        if lock is None:
            stop.wait(lease_s / 4)
            continue
        try:
            _lead(stop, lock, fire_due, changes)
        finally:
            if not lock._store.closed:
                lock.release()


def _lead(
    stop: StopSignal,
    lock: Lock,
    fire_due: Callable[[Lock], float | None],
    changes: WakeReceiver,
) -> None:
    renew_every = lock.ttl_s / 3
    renew_at = time.monotonic() + renew_every
    while not stop.is_set():
        if time.monotonic() >= renew_at:
            if not lock.renew():
                raise LeadershipLost(f"{lock.owner!r} failed to renew {SCHEDULER_LOCK!r}")
            renew_at = time.monotonic() + renew_every
        next_fire_at = fire_due(lock)
        sleep = renew_at - time.monotonic()
        if next_fire_at is not None:
            sleep = min(sleep, next_fire_at - time.time())
        if sleep > 0:
            changes.recv(sleep)
