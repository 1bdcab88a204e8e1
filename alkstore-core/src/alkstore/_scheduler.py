"""The scheduler: leadership, the fire loop and catch-up, the same for every engine.

An engine supplies storage primitives (``Store._due_schedules``,
``Store._fire_boundary``, ``Store._until_next_fire``); everything else is here.
One runner across all processes leads: it holds the lock
``__alkstore_scheduler`` and renews it. For every elapsed boundary of a due
schedule (at most :data:`~alkstore._every.MAX_CATCH_UP`, then it skips ahead)
the engine fires ONE transaction that renews the lock (only an unexpired
holder can), advances the schedule from that boundary (only if it is still
there) and enqueues the job. So a deposed leader never fires, a long
catch-up never outlives the lease, and a schedule changed meanwhile is
re-read rather than fired from stale data.

The loop rides out database outages: a failed call never ends it. A leader
whose call fails may no longer be leader, so it stops firing at once and
campaigns again; as the lock is re-taken by the same owner while it still
holds it, a short outage costs nothing but the pause. Because every boundary
commits alone and is fenced by the lock and by the boundary it advances from,
a commit whose outcome the failure left unknown is never fired twice.
"""

from __future__ import annotations

import datetime
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from alkstore._cron import is_cron, parse_cron
from alkstore._errors import Closed, Database, InvalidSpec, LeadershipLost
from alkstore._every import MAX_CATCH_UP, FirePlan, plan_cron_fires, plan_fires
from alkstore._lock import Lock
from alkstore._names import SCHEDULER_LOCK, SCHEDULES_WAKE_KEY
from alkstore._options import ScheduleOpts
from alkstore._outage import Outage, is_permanent
from alkstore._receivers import WakeReceiver

if TYPE_CHECKING:
    from alkstore._store import StopSignal, Store

__all__ = ["DueSchedule", "DueSchedules", "Fired", "plan_for", "run_scheduler"]

log = logging.getLogger("alkstore.scheduler")


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """A schedule whose next boundary has come, as ``Store._due_schedules`` read it.

    The fields follow a schedule row's columns, so an engine may build one
    straight from a row: ``DueSchedule(*row)``.
    """

    name: str
    """The schedule's name."""
    interval_s: float
    """An ``@every`` schedule's interval in seconds (a cron schedule's is its spec's)."""
    queue: str
    """The queue each fire enqueues into."""
    payload_json: str
    """The payload of each fire's job, encoded as JSON."""
    priority: int
    """The priority of each fire's job."""
    max_attempts: int | None
    """The max_attempts of each fire's job; None takes the queue's."""
    expires_s: float | None
    """How long each fire's job may wait before it expires; None never."""
    next_fire_at: float
    """The boundary it is at (Unix seconds, the engine's clock)."""
    spec: str | None = None
    """The spec as given (engine contract 1.4). None from an engine written for
    an older contract, which stores ``@every`` schedules only: then
    ``interval_s`` is all there is to plan with."""
    tz: str | None = None
    """A cron spec's time zone as given (``ScheduleOpts.tz``); None is UTC
    (engine contract 1.4)."""
    key: str | None = None
    """The unique key of each fire's job (``ScheduleOpts.key``), else None
    (engine contract 1.4)."""

    @property
    def opts(self) -> ScheduleOpts:
        """The options each fire enqueues with (priority, max_attempts, expires, key)."""
        return ScheduleOpts(
            priority=self.priority, max_attempts=self.max_attempts, expires=self.expires_s,
            key=self.key,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class DueSchedules:
    """Every due schedule, and the engine's ``now`` they were read at."""

    now: float
    """The engine's clock when the schedules were read (Unix seconds)."""
    schedules: list[DueSchedule]
    """The schedules whose next boundary is at or before ``now``."""


class Fired(enum.Enum):
    """What ``Store._fire_boundary`` did with one boundary."""

    FIRED = "fired"
    """The lock was renewed, the schedule advanced and the job enqueued: committed."""
    SCHEDULE_CHANGED = "schedule changed"
    """The schedule is no longer at that boundary (changed or deleted): nothing written."""
    NOT_LEADER = "not leader"
    """The lock is gone or held by another owner: nothing written."""


def run_scheduler(store: Store, stop: StopSignal, owner: str) -> None:
    """Lead or stand by until ``stop`` is set; see ``Store.run_schedules``.

    A standby campaigns every quarter lease; a leader renews every third of
    it, fires what is due, and sleeps until the next boundary, a renewal, or
    a schedule change (a wake of ``SCHEDULES_WAKE_KEY``), whichever is first.

    A :class:`~alkstore.Database` error from any call is an outage, never the
    end: one warning per outage, pauses of up to a few seconds, then a leader
    campaigns again (firing nothing meanwhile). Leadership is released on the
    way out; a release the database fails is logged, and the lock lapses by
    itself after its lease.

    Raises:
        LeadershipLost: the database answered that the leader's lock is gone —
            a renew returned False, or a boundary found the lock taken.
        Closed: the store was closed.
    """
    lease_s = store.scheduler_lease_s
    outage = Outage(log, "the scheduler")
    changes = _Changes(lambda: store._watch(SCHEDULES_WAKE_KEY), outage)
    led: Lock | None = None
    try:
        while not stop.is_set():
            try:
                lock = store._try_lock(SCHEDULER_LOCK, owner, lease_s)
            except Database as exc:
                stop.wait(outage.failed("taking scheduler leadership", exc))
                continue
            outage.succeeded()
            if lock is None:
                stop.wait(lease_s / 4)
                continue
            led = lock
            _lead(store, stop, lock, changes, outage)
    finally:
        changes.close()
        if led is not None:
            _release(led, outage)


def _lead(store: Store, stop: StopSignal, lock: Lock, changes: _Changes, outage: Outage) -> None:
    """Renew and fire until ``stop``; return after a pause when the database fails."""
    renew_every = lock.ttl_s / 3
    unplannable: set[tuple[str, str | None, str | None]] = set()
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
            next_fire_at = _fire_due(store, lock, unplannable, stop)
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


def plan_for(schedule: DueSchedule, now: float) -> FirePlan:
    """The fires ``schedule`` is owed at ``now``: by its cron spec, or its interval.

    Raises:
        InvalidSpec: its stored cron spec or zone is not valid on this host
            (a zone its zone data lacks, say).
    """
    if schedule.spec is not None and is_cron(schedule.spec):
        cron = parse_cron(schedule.spec, schedule.tz)
        return plan_cron_fires(schedule.next_fire_at, cron, now)
    return plan_fires(schedule.next_fire_at, schedule.interval_s, now)


_UNPLANNABLE_RETRY_S = 1.0
"""How soon a leader looks again while a due schedule cannot be planned."""


def _fire_due(
    store: Store,
    lock: Lock,
    unplannable: set[tuple[str, str | None, str | None]],
    stop: StopSignal,
) -> float | None:
    """Fire every elapsed boundary, until ``stop``; return when (this host's
    clock) the next is due.

    Fires in rounds: each reads the due schedules again and fires the next
    boundary each one is owed. The boundaries owed (at most ``MAX_CATCH_UP``)
    are planned once per catch-up, but each fires the schedule's contents as
    the round read them: a schedule replaced meanwhile with the same timing
    (another queue or payload) fires its new contents from the next round
    on, not the rest of the catch-up from the row read before. Every
    schedule gets its turn, and ``stop`` is looked at between fires. A
    schedule this host cannot plan (its zone unknown here) is logged once
    and left due; the others fire as ever.
    """
    plans: dict[str, _Owed] = {}
    stuck = False
    while not stop.is_set():
        fired, stuck = _fire_round(store, lock, plans, unplannable, stop)
        if not fired:
            break
    until_next = store._until_next_fire()
    if stuck:  # the stuck one is the earliest: look again soon, never in a loop
        until_next = max(_UNPLANNABLE_RETRY_S, until_next or 0.0)
    return None if until_next is None else time.time() + until_next


@dataclass(frozen=True)
class _Owed:
    """What a schedule is still owed in a catch-up, and the timing it was planned for."""

    timing: tuple[str | None, float, str | None]
    """The schedule's spec, interval and zone: a change of any of them plans anew."""
    plan: FirePlan


def _fire_round(
    store: Store,
    lock: Lock,
    plans: dict[str, _Owed],
    unplannable: set[tuple[str, str | None, str | None]],
    stop: StopSignal,
) -> tuple[bool, bool]:
    """Fire the next owed boundary of each due schedule; return whether any
    fired and whether a due schedule could not be planned."""
    fired_any = stuck = False
    due = store._due_schedules()
    for schedule in due.schedules:
        if stop.is_set():
            break
        try:
            plan = _owed(schedule, due.now, plans.get(schedule.name))
        except InvalidSpec as exc:
            stuck = True
            key = (schedule.name, schedule.spec, schedule.tz)
            if key not in unplannable:
                unplannable.add(key)
                log.error("schedule %r cannot fire on this host: %s", schedule.name, exc)
            continue
        if not plan.fire_at:
            continue
        queue_opts = store._declared_queue_opts(schedule.queue)
        stamp = store._stamp(queue_opts, schedule.opts.as_enqueue_opts())
        rest = FirePlan(plan.fire_at[1:], plan.next_fire_at, skipped=0)
        advance_to = rest.fire_at[0] if rest.fire_at else rest.next_fire_at
        fired = store._fire_boundary(lock, schedule, plan.fire_at[0], advance_to, stamp)
        if fired is Fired.NOT_LEADER:
            raise LeadershipLost(f"{lock.owner!r} no longer holds {SCHEDULER_LOCK!r}")
        if fired is Fired.FIRED and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "schedule %r fired its boundary at %s into %r",
                schedule.name, _utc(plan.fire_at[0]), schedule.queue,
            )  # fmt: skip
        if fired is Fired.FIRED and rest.fire_at:
            plans[schedule.name] = _Owed(_timing(schedule), rest)
        else:  # done, or changed meanwhile: the next round plans it anew
            plans.pop(schedule.name, None)
        fired_any = fired_any or fired is Fired.FIRED
    return fired_any, stuck


def _utc(moment: float) -> str:
    """``moment`` (Unix seconds) as an ISO 8601 UTC time, for a log record."""
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).isoformat(
        timespec="milliseconds"
    )


def _owed(schedule: DueSchedule, now: float, owed: _Owed | None) -> FirePlan:
    """The boundaries ``schedule`` is owed: what is left of its catch-up while
    it still stands where that left it, with the same timing; else planned
    now (logging what the catch-up cap skips)."""
    if (
        owed is not None
        and owed.timing == _timing(schedule)
        and owed.plan.fire_at[0] == schedule.next_fire_at
    ):
        return owed.plan
    plan = plan_for(schedule, now)
    if plan.skipped:
        log.warning(
            "schedule %r: %s%d missed boundaries skipped (at most %d are caught up)",
            schedule.name, "more than " if plan.skipped_at_least else "", plan.skipped,
            MAX_CATCH_UP,
        )  # fmt: skip
    return plan


def _timing(schedule: DueSchedule) -> tuple[str | None, float, str | None]:
    return schedule.spec, schedule.interval_s, schedule.tz


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
        if not is_permanent(exc):  # the run raises a permanent one: nothing more to say
            outage.failed(f"releasing {SCHEDULER_LOCK!r} (it lapses within {lock.ttl_s:g} s)", exc)
