"""Deliberately broken variants of the memory engine, one defect each.

The suite's own tests run the conformance suite against them to show it
catches each defect in the tests that name it.
"""

from __future__ import annotations

import time
from typing import ClassVar

from alkstore.engine import Job
from alkstore_example_memory import (
    MemoryEngine,
    MemoryQueue,
    MemoryStore,
    MemoryStream,
    MemoryTx,
)

__all__ = [
    "DoubleClaimEngine",
    "ImmortalLocksEngine",
    "NoRollbackEngine",
    "OffsetsBackEngine",
]


class _ClaimChecksThenActs(MemoryQueue):
    """Picks the ready jobs, lets go of the database, then marks them: two
    claimers racing through the gap both get the same jobs."""

    def _claim(self, worker_id: str, n: int) -> list[Job]:
        now = time.time()
        with self.db.lock:
            self._release_lapsed(now)
            ready = sorted(
                (r for r in self.db.jobs.values() if self._claimable(r, now)),
                key=lambda r: (-r.priority, r.run_at, r.id),
            )[:n]
        time.sleep(0.001)  # the gap
        with self.db.lock:
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
        self.writes.append(lambda: self.db.offsets.__setitem__((stream, consumer), offset))
        return True


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
