"""Deliberately broken variants of the memory engine, one defect each.

The suite's own tests run the conformance suite against them to show it
catches each defect in the tests that name it.
"""

from __future__ import annotations

import contextlib
import time
from typing import ClassVar, TypeVar

from alkstore import RESERVED_PREFIX, Schedule, ScheduleOpts, StreamEvent, Wake
from alkstore.engine import (
    BufferedWakeReceiver,
    DueSchedule,
    Fired,
    Job,
    JobStamp,
    Lock,
    PlacedSchedule,
    WakeFanout,
    WakeReceiver,
    decode,
)
from alkstore_example_memory import (
    MemoryEngine,
    MemoryQueue,
    MemoryStore,
    MemoryStream,
    MemoryTx,
)

__all__ = [
    "DeafWakesEngine",
    "DoubleClaimEngine",
    "DriftingSchedulesEngine",
    "EarlyOwnWakesEngine",
    "EchoingWakesEngine",
    "ForgetsZonesEngine",
    "ImmortalLocksEngine",
    "LeakyAdoptionEngine",
    "NoRollbackEngine",
    "OffsetsBackEngine",
    "OneChannelPerCommitEngine",
    "ShortSightedKeysEngine",
    "SilentTrimEngine",
    "SilentWakeDeathEngine",
    "UpsertMovesScheduleEngine",
]

_T = TypeVar("_T")


class _ClaimChecksThenActs(MemoryQueue):
    """Picks the ready jobs, lets go of the database, then marks them: two
    claimers racing through the gap both get the same jobs."""

    def _claim(self, worker_id: str, n: int) -> list[Job]:
        now = time.time()
        with self.db.writing():
            self._release_lapsed(now)
            ready = sorted(
                (r for r in self.db.jobs.values() if self._claimable(r, now)),
                key=lambda r: (-r.priority, r.run_at, r.id),
            )[:n]
        time.sleep(0.001)  # the gap
        with self.db.writing():
            for row in ready:
                self._mark_claimed(row, worker_id, now)
            return [self._job(row, worker_id) for row in ready]


class _RollbackCommits(MemoryTx):
    def _rollback(self) -> None:
        self._commit()


class _OffsetsMoveBack(MemoryStream):
    def _save_offset(self, consumer: str, offset: int) -> bool:
        self._store.db.offsets[(self.name, consumer)] = offset
        return True


class _OffsetTxMovesBack(MemoryTx):
    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        self.connection.writes.append(
            lambda: self.db.offsets.__setitem__((stream, consumer), offset)
        )
        return True


class _ReadsSkipTrimmedEvents(MemoryStream):
    """Reads whatever is left after a trim, as if nothing had been there."""

    def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        with self._store.db.state:
            rows = [e for e in self._store.db.events if e[1] == self.name and e[0] > offset]
        return [StreamEvent(o, s, k, decode(p), t) for o, s, k, p, t in rows[:limit]]


class _LocksNeverExpire(MemoryStore):
    def _expired(self, holder: tuple[str, float], now: float) -> bool:
        return False


class DoubleClaimEngine(MemoryEngine):
    """Hands one job to two claimers."""

    name = "memory-double-claim"
    schemes = ("memory-double-claim",)
    store_class: ClassVar[type[MemoryStore]] = type(
        "DoubleClaimStore", (MemoryStore,), {"queue_class": _ClaimChecksThenActs}
    )


class NoRollbackEngine(MemoryEngine):
    """Commits what a rollback should drop."""

    name = "memory-no-rollback"
    schemes = ("memory-no-rollback",)
    store_class: ClassVar[type[MemoryStore]] = type(
        "NoRollbackStore", (MemoryStore,), {"tx_class": _RollbackCommits}
    )


class OffsetsBackEngine(MemoryEngine):
    """Lets consumer offsets move backwards."""

    name = "memory-offsets-back"
    schemes = ("memory-offsets-back",)
    store_class: ClassVar[type[MemoryStore]] = type(
        "OffsetsBackStore",
        (MemoryStore,),
        {"stream_class": _OffsetsMoveBack, "tx_class": _OffsetTxMovesBack},
    )


class ImmortalLocksEngine(MemoryEngine):
    """Never lets a lock expire."""

    name = "memory-immortal-locks"
    schemes = ("memory-immortal-locks",)
    store_class: ClassVar[type[MemoryStore]] = _LocksNeverExpire


class _NotifyTxWakesOwnListenersAtOnce(MemoryTx):
    """Wakes the listeners of its own store as soon as ``notify_tx`` runs, before
    the commit (a rollback then leaves a ghost wake behind)."""

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        super()._notify_tx(channel, payload_json)
        with self.db.state:
            own = [r for r in self._store._mine if r.channel == channel]
        for receiver in own:
            receiver.deliver(Wake(channel))


class _AdoptedSideEffectsAtOnce(MemoryTx):
    """Applies each side effect of an adopted transaction at once, as if the
    caller's connection were in autocommit: seen and waking before the caller
    commits, and kept when it rolls back."""

    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        return self._at_once(super()._enqueue_tx(queue, stamp, payload_json))

    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        return self._at_once(super()._publish_tx(stream, key, payload_json))

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        self._at_once(super()._notify_tx(channel, payload_json))

    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        return self._at_once(super()._save_offset_tx(stream, consumer, offset))

    def _at_once(self, result: _T) -> _T:
        if self.adopted:
            pending = self.connection
            for write in pending.writes:
                write()
            self.db.wake(pending.wakes)
            pending.writes, pending.wakes = [], set()
        return result


class _DriftingSchedulesStore(MemoryStore):
    """Computes each next boundary from the moment it fired, not from the last boundary."""

    def _fire_boundary(
        self, lock: Lock, schedule: DueSchedule, boundary: float, advance_to: float,
        stamp: JobStamp,
    ) -> Fired:  # fmt: skip
        drifted = time.time() + schedule.interval_s
        return super()._fire_boundary(lock, schedule, boundary, drifted, stamp)


class _UpsertMovesScheduleStore(MemoryStore):
    """An upsert of an unchanged schedule starts its next interval from now."""

    def _schedule(
        self, name: str, spec: str, interval_s: int, queue: str, payload_json: str,
        opts: ScheduleOpts,
    ) -> Schedule:  # fmt: skip
        with self.db.writing():
            existing = self.db.schedules.get(name)
            if existing is not None and existing["spec"] == spec:
                placed = existing["placed"]
                moved = PlacedSchedule(
                    placed.spec, placed.anchor, time.time() + interval_s, placed.tz
                )
                existing["placed"] = moved
            return super()._schedule(name, spec, interval_s, queue, payload_json, opts)


class _ForgetsZonesStore(MemoryStore):
    """Stores a cron schedule without its time zone (reads every spec in UTC)."""

    def _schedule(
        self, name: str, spec: str, interval_s: int, queue: str, payload_json: str,
        opts: ScheduleOpts,
    ) -> Schedule:  # fmt: skip
        utc = ScheduleOpts(priority=opts.priority, max_attempts=opts.max_attempts,
                           expires=opts.expires)  # fmt: skip
        return super()._schedule(name, spec, interval_s, queue, payload_json, utc)


class _OneChannelPerCommit(MemoryTx):
    """Each ``notify_tx`` forgets the channel an earlier one named: a commit wakes
    only the last channel notified."""

    _notified: str | None = None

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        if self._notified is not None:
            self.connection.wakes.discard(self._notified)
        self._notified = channel
        super()._notify_tx(channel, payload_json)


class _MuteFanout(WakeFanout):
    def deliver(self, keys: object) -> None:
        pass


class _SilentWakeDeathStore(MemoryStore):
    """When the wake path dies, delivers nothing more but leaves receivers open."""

    def fail_wakes(self, error: BaseException) -> None:
        self.db.wakes = _MuteFanout(coalesce=True)  # the old receivers hear nothing more


class _EchoingReceiver(WakeReceiver):
    """Hands out its first wake again and again: the same wake comes back forever."""

    def __init__(self, inner: BufferedWakeReceiver) -> None:
        self.channel = inner.channel
        self._inner = inner
        self._echo: Wake | None = None

    @property
    def closed(self) -> bool:
        return self._inner.closed

    def close(self) -> None:
        self._inner.close()

    def recv(self, timeout: float | None = None) -> Wake | None:
        if self._echo is None:
            self._echo = self._inner.recv(timeout)
        elif self._inner.closed:
            return None
        if self._echo is not None:
            # The loop takes no lock once it echoes, so the time limit's signal
            # lands here, never between a lock's acquire and its release (the
            # test's cleanup would then wait for that lock forever).
            time.sleep(0.005)
        return self._echo


class _DeafReceiver(BufferedWakeReceiver):
    """Waits for a wake and swallows everything meant to stop it, the time
    limit's exception included: only ending the process ends it."""

    def recv(self, timeout: float | None = None) -> Wake | None:
        while True:
            with contextlib.suppress(BaseException):  # deaf on purpose
                time.sleep(0.05)


class _DeafWakesStore(MemoryStore):
    def _watch(self, key: str) -> WakeReceiver:
        if key.startswith(RESERVED_PREFIX):
            return super()._watch(key)
        return _DeafReceiver(key)  # only a listen() goes deaf


class _EchoingWakesStore(MemoryStore):
    def _watch(self, key: str) -> WakeReceiver:
        receiver = super()._watch(key)
        if key.startswith(RESERVED_PREFIX):
            return receiver
        assert isinstance(receiver, BufferedWakeReceiver)
        return _EchoingReceiver(receiver)  # only a listen() echoes


class _KeysSeenOnlyInTheirTransaction(MemoryTx):
    """Deduplicates a key against the transaction's own enqueues only: a job
    another transaction committed with the key gets a duplicate."""

    def _live_job_with_key(self, queue: str, key: str) -> int | None:
        return self._connection.keyed.get((queue, key))


class ShortSightedKeysEngine(MemoryEngine):
    """Lets a keyed enqueue duplicate a live job another transaction committed."""

    name = "memory-short-sighted-keys"
    schemes = ("memory-short-sighted-keys",)
    store_class: ClassVar[type[MemoryStore]] = type(
        "ShortSightedKeysStore", (MemoryStore,), {"tx_class": _KeysSeenOnlyInTheirTransaction}
    )


class SilentTrimEngine(MemoryEngine):
    """Lets a read after a trim skip the trimmed events without a word."""

    name = "memory-silent-trim"
    schemes = ("memory-silent-trim",)
    store_class: ClassVar[type[MemoryStore]] = type(
        "SilentTrimStore", (MemoryStore,), {"stream_class": _ReadsSkipTrimmedEvents}
    )


class LeakyAdoptionEngine(MemoryEngine):
    """Lets an adopted transaction's side effects out before the caller commits."""

    name = "memory-leaky-adoption"
    schemes = ("memory-leaky-adoption",)
    store_class: ClassVar[type[MemoryStore]] = type(
        "LeakyAdoptionStore", (MemoryStore,), {"tx_class": _AdoptedSideEffectsAtOnce}
    )


class EarlyOwnWakesEngine(MemoryEngine):
    """Wakes a transaction's own store's listeners before commit."""

    name = "memory-early-own-wakes"
    schemes = ("memory-early-own-wakes",)
    store_class: ClassVar[type[MemoryStore]] = type(
        "EarlyOwnWakesStore", (MemoryStore,), {"tx_class": _NotifyTxWakesOwnListenersAtOnce}
    )


class DriftingSchedulesEngine(MemoryEngine):
    """Lets schedule boundaries drift by the runner's lateness."""

    name = "memory-drifting-schedules"
    schemes = ("memory-drifting-schedules",)
    store_class: ClassVar[type[MemoryStore]] = _DriftingSchedulesStore


class ForgetsZonesEngine(MemoryEngine):
    """Drops ScheduleOpts.tz: cron schedules fire in UTC."""

    name = "memory-forgets-zones"
    schemes = ("memory-forgets-zones",)
    store_class: ClassVar[type[MemoryStore]] = _ForgetsZonesStore


class UpsertMovesScheduleEngine(MemoryEngine):
    """Moves an unchanged schedule's next fire time on upsert."""

    name = "memory-upsert-moves-schedule"
    schemes = ("memory-upsert-moves-schedule",)
    store_class: ClassVar[type[MemoryStore]] = _UpsertMovesScheduleStore


class OneChannelPerCommitEngine(MemoryEngine):
    """Wakes only one of the channels a commit notified."""

    name = "memory-one-channel-per-commit"
    schemes = ("memory-one-channel-per-commit",)
    store_class: ClassVar[type[MemoryStore]] = type(
        "OneChannelPerCommitStore", (MemoryStore,), {"tx_class": _OneChannelPerCommit}
    )


class SilentWakeDeathEngine(MemoryEngine):
    """Falls silent when its wake path dies: receivers stay open, nothing comes."""

    name = "memory-silent-wake-death"
    schemes = ("memory-silent-wake-death",)
    store_class: ClassVar[type[MemoryStore]] = _SilentWakeDeathStore


class DeafWakesEngine(MemoryEngine):
    """Its receivers never return, whatever interrupts them."""

    name = "memory-deaf-wakes"
    schemes = ("memory-deaf-wakes",)
    store_class: ClassVar[type[MemoryStore]] = _DeafWakesStore


class EchoingWakesEngine(MemoryEngine):
    """Never consumes a wake: a test draining its receiver loops forever."""

    name = "memory-echoing-wakes"
    schemes = ("memory-echoing-wakes",)
    store_class: ClassVar[type[MemoryStore]] = _EchoingWakesStore
