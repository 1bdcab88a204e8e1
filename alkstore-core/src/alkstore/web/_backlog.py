"""A queue's backlog over time, sampled by the dashboard process itself.

No per-queue throughput is stored anywhere, so the dashboard keeps what it
saw: each time the overview is read (at most every ``every_s``) it records
the pending + processing count of every queue, and draws the last
``keep`` samples. It shows nothing from before this process started.
"""

from __future__ import annotations

import collections
import time

from alkstore import QueueStats

__all__ = ["Backlog"]


class Backlog:
    """The last samples of each queue's live jobs (pending + processing)."""

    def __init__(self, *, every_s: float = 1.0, keep: int = 60) -> None:
        self.every_s = every_s
        self.keep = keep
        self._samples: dict[str, collections.deque[int]] = {}
        self._last = float("-inf")

    def record(self, stats: list[QueueStats], now: float | None = None) -> None:
        """Add one sample per queue unless the last was under ``every_s`` ago."""
        now = time.monotonic() if now is None else now
        if now - self._last < self.every_s:
            return
        self._last = now
        for queue in stats:
            live = queue.total - queue.dead
            samples = self._samples.setdefault(queue.name, collections.deque(maxlen=self.keep))
            samples.append(live)

    def points(self, name: str, *, width: int = 120, height: int = 24) -> str:
        """SVG polyline points of ``name``'s samples, scaled to the box; "" with fewer than 2."""
        samples = list(self._samples.get(name, ()))
        if len(samples) < 2:
            return ""
        top = max(samples) or 1
        step = width / (self.keep - 1)
        start = width - step * (len(samples) - 1)
        return " ".join(
            f"{start + i * step:.1f},{height - 1 - (height - 2) * value / top:.1f}"
            for i, value in enumerate(samples)
        )

    def __repr__(self) -> str:
        return f"<Backlog of {len(self._samples)} queues, every {self.every_s} s>"
