"""The claims a store handed out, so ``ack_batch`` by job id is fenced like ``ack``.

``Job.ack`` is fenced by the claim it holds: job id, attempt and worker. A
batch ack names jobs by id only, so the store remembers the attempt of each
claim it handed out, per queue and worker; an id acked through the store that
claimed it is then fenced by that attempt, and a stale id (the job reclaimed
since, by another process under the same worker id) acks nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alkstore._job import ClaimedJob

__all__ = ["ClaimLedger"]

_REMEMBERED = 50_000
"""Claims remembered per store, newest first; older ids ack unfenced by attempt.
An acked job's claim is forgotten at once (its id is never claimed again), so
a store holds about as many as its claims outstanding, not this many."""


class ClaimLedger:
    """The latest claim of each job this store handed out: (worker id, attempt)."""

    def __init__(self, capacity: int = _REMEMBERED) -> None:
        self._claims: OrderedDict[tuple[str, int], tuple[str, int]] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._claims)

    def __repr__(self) -> str:
        return f"<ClaimLedger {len(self._claims)} claims remembered>"

    def remember(self, queue: str, jobs: Iterable[ClaimedJob[Any]]) -> None:
        """Record the claims ``jobs`` just made on ``queue``."""
        with self._lock:
            claims = self._claims
            for job in jobs:
                key = (queue, job.id)
                claims[key] = (job.worker_id, job.attempts)
                claims.move_to_end(key)
            while len(claims) > self._capacity:
                claims.popitem(last=False)

    def forget(self, queue: str, job_ids: Iterable[int]) -> None:
        """Drop the claims of jobs that were acked: ids are never claimed again."""
        with self._lock:
            for job_id in job_ids:
                self._claims.pop((queue, job_id), None)

    def batch_acked(self, queue: str, claims: list[tuple[int, int | None]], acked: int) -> None:
        """After an ``ack_batch`` of ``claims`` that acked ``acked``: forget them all
        if every one went (which went of a batch acked in part is not known)."""
        if acked == len(claims):
            self.forget(queue, (job_id for job_id, _ in claims))

    def attempt(self, queue: str, job_id: int, worker_id: str) -> int | None:
        """The attempt of ``worker_id``'s latest claim of the job through this store, if known."""
        ((_, attempt),) = self.attempts(queue, (job_id,), worker_id)
        return attempt

    def attempts(
        self, queue: str, job_ids: Iterable[int], worker_id: str
    ) -> list[tuple[int, int | None]]:
        """Each job id with :meth:`attempt`'s answer for it, looked up under one lock."""
        with self._lock:
            found = [(job_id, self._claims.get((queue, job_id))) for job_id in job_ids]
        return [
            (job_id, claim[1] if claim is not None and claim[0] == worker_id else None)
            for job_id, claim in found
        ]
