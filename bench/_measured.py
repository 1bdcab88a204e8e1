"""What every subject's measuring shares, whatever its engine.

``Measured`` dispatches operations to ``_<operation>`` methods; the helpers
keep a ready backlog, check results and time worker drains the same way for
every subject, so figures of one engine compare.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

from _harness import Sizes, in_processes, latency_split, percentile

__all__ = [
    "BATCH",
    "CHANNEL",
    "PAGE",
    "QUEUE",
    "STREAM",
    "TASKS",
    "WAKE_TIMEOUT_S",
    "Measured",
    "backlog_rounds",
    "check_count",
    "drain_seconds",
]

QUEUE = "bench"
STREAM = "bench"
CHANNEL = "bench"
BATCH = 32
"""Jobs per claim in the ``drain_batch_*`` rows (and pgqueuer's ``batch_size``)."""
TASKS = 32
"""Concurrent enqueuers in ``async_enqueue_1_32t``: tasks on one store or pool (threads on
one Store for alkstore's sync API)."""
PAGE = 1000
"""Events per read when replaying a stream."""
WAKE_TIMEOUT_S = 10.0


class Measured:
    """Dispatch ``measure(operation)`` to ``_<operation>`` methods.

    Both quantiles of a latency (``*_p50``, ``*_p99``) come from one sampling,
    made once per run size and kept (a failure is kept too).
    """

    name = ""
    engine = ""
    notes = ""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, Sizes], object] = {}

    def unavailable(self) -> str | None:
        return None

    def measure(self, operation: str, sizes: Sizes) -> float | None:
        split = latency_split(operation)
        if split is None:
            method = getattr(self, f"_{operation}", None)
            result = None if method is None else method(sizes)
            return None if result is None else float(result)
        base, fraction = split
        method = getattr(self, f"_{base}", None)
        if method is None:
            return None
        samples = self.once(base, sizes, lambda: method(sizes))
        assert isinstance(samples, list)
        return percentile(samples, fraction)

    def once(self, key: str, sizes: Sizes, run: Callable[[], object]) -> object:
        """``run()`` the first time ``key`` is asked for at these sizes; its result after."""
        if (key, sizes) not in self._kept:
            try:
                self._kept[key, sizes] = run()
            except Exception as exc:
                self._kept[key, sizes] = exc
        kept = self._kept[key, sizes]
        if isinstance(kept, BaseException):
            raise kept
        return kept

    def _drain_one_1w(self, sizes: Sizes) -> float | None:
        return self._drain(sizes, 1, batch=False)

    def _drain_one_4w(self, sizes: Sizes) -> float | None:
        return self._drain(sizes, 4, batch=False)

    def _drain_batch_1w(self, sizes: Sizes) -> float | None:
        return self._drain(sizes, 1, batch=True)

    def _drain_batch_4w(self, sizes: Sizes) -> float | None:
        return self._drain(sizes, 4, batch=True)

    def _drain(self, sizes: Sizes, workers: int, *, batch: bool) -> float | None:
        return None

    def _claim_backlog_300(self, sizes: Sizes) -> float | None:
        return self._claim_backlog(300, sizes)

    def _claim_backlog_3000(self, sizes: Sizes) -> float | None:
        return self._claim_backlog(3_000, sizes)

    def _claim_backlog_30000(self, sizes: Sizes) -> float | None:
        return self._claim_backlog(30_000, sizes)

    def _claim_backlog_1000000(self, sizes: Sizes) -> float | None:
        if 1_000_000 not in sizes.backlogs:
            return None  # --quick
        return self._claim_backlog(1_000_000, sizes)

    def _claim_backlog(self, backlog: int, sizes: Sizes) -> float | None:
        return None


def backlog_rounds(
    backlog: int, claims: int, top_up: Callable[[int], object], claim_and_ack: Callable[[], bool]
) -> float:
    """Claims per second with the ready backlog kept within [0.9 B, B].

    ``top_up(count)`` enqueues ``count`` jobs, untimed; each timed round
    claims and acks ``min(B // 10, left)`` jobs with ``claim_and_ack``.
    """
    top_up(backlog)
    timed = 0.0
    left = claims
    while left > 0:
        round_size = min(max(backlog // 10, 1), left)
        started = time.perf_counter()
        for _ in range(round_size):
            if not claim_and_ack():
                raise RuntimeError("the backlog ran dry: a claim or an ack found nothing")
        timed += time.perf_counter() - started
        left -= round_size
        top_up(round_size)
    return claims / timed


def read_pages(read_page: Callable[[int], list[Any]], expected: int) -> None:
    """Read a stream of ``(id, payload JSON)`` rows from 0, a page per ``read_page(after)``,
    decoding each payload, and check that ``expected`` events came back."""
    offset, count = 0, 0
    while rows := read_page(offset):
        page = [(id_, json.loads(payload)) for id_, payload in rows]
        count += len(page)
        offset = page[-1][0]
    check_count("replayed events", count, expected)


def check_count(what: str, found: object, expected: int) -> None:
    if found != expected:
        raise RuntimeError(f"{what}: {found!r}, expected {expected}")


def drain_seconds(
    work: Callable[[int, Any], object], argument: dict[str, Any], count: int
) -> float:
    """Seconds from the release of ``count`` worker processes until the last has finished.

    ``in_processes`` runs them; each worker notes the wall clock when it is
    released and when ``work(index, argument)`` returns (its jobs done and its
    connections closed), and this returns the last finish minus the first
    release. ``in_processes``'s own figure runs to the last process *exit*,
    which adds interpreter teardown: 0.2 s or more per process with a peer
    library's imports, and more with 4 processes on 2 cores, against drains
    of well under a second at ``--quick`` sizes.
    """
    context = multiprocessing.get_context("spawn")
    times = context.Queue()
    in_processes(_timed_work, {**argument, "work": work, "times": times}, count)
    spans: list[tuple[float, float]] = [times.get(timeout=30) for _ in range(count)]
    return max(end for _, end in spans) - min(start for start, _ in spans)


def _timed_work(index: int, argument: dict[str, Any]) -> None:
    released: list[float] = []

    def ready() -> None:
        argument["ready"]()
        released.append(time.time())

    argument["work"](index, {**argument, "ready": ready})
    argument["times"].put((released[0], time.time()))
