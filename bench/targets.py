"""The targets alkstore is held to, as data: each is checked within one run.

Three kinds:

- ``vs_anchor``: alkstore's figure divided by an anchor's on the same
  operation (the report's ratio, > 1 = alkstore better) is at least ``bound``.
  The anchor is the subject whose name starts with ``anchor``.
- ``vs_own``: alkstore's figure divided by alkstore's own figure on
  ``versus`` is at least ``bound`` (claim rate flat in the backlog).
- ``at_most``: alkstore's figure, in the operation's unit, is at most ``bound``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from _harness import OPERATIONS

__all__ = ["TARGETS", "TIMES", "Target", "Verdict", "judge"]

TIMES = "\N{MULTIPLICATION SIGN}"

Kind = Literal["vs_anchor", "vs_own", "at_most"]


@dataclass(frozen=True)
class Target:
    engine: str
    operation: str
    kind: Kind
    bound: float
    anchor: str = ""
    """vs_anchor: the anchor subject, by the start of its name ("raw", "pgqueuer")."""
    versus: str = ""
    """vs_own: the operation whose alkstore figure is the reference."""

    def describe(self) -> str:
        if self.kind == "vs_anchor":
            return f"≥ {self.bound:g}{TIMES} {self.anchor}"
        if self.kind == "vs_own":
            return f"≥ {self.bound:g}{TIMES} own {OPERATIONS[self.versus].label}"
        return f"≤ {self.bound:g} {OPERATIONS[self.operation].unit}"


def _anchored(engine: str, anchor: str, bounds: dict[str, float]) -> list[Target]:
    return [Target(engine, key, "vs_anchor", bound, anchor=anchor) for key, bound in bounds.items()]


def _flat_backlog(engine: str) -> list[Target]:
    return [
        Target(engine, f"claim_backlog_{backlog}", "vs_own", 0.8, versus="claim_backlog_300")
        for backlog in (30_000, 1_000_000)
    ]


TARGETS: list[Target] = [
    # SQLite
    # The floors (issue 19, "closer to the floor"): raised from 0.6 (enqueue 1/tx) and 0.5.
    *_anchored(
        "sqlite",
        "raw",
        {
            "enqueue_1": 0.75,
            "enqueue_100": 0.5,
            "drain_one_1w": 0.75,
            "drain_one_4w": 0.75,
            "replay": 0.8,
        },
    ),
    *_flat_backlog("sqlite"),
    Target("sqlite", "notify_wake_p50", "at_most", 1.3),
    Target("sqlite", "notify_wake_p99", "at_most", 3.0),
    Target("sqlite", "idle_cpu", "at_most", 1.0),
    # PostgreSQL
    *_anchored(
        "postgres",
        "raw",
        {
            "enqueue_1": 0.8,
            "enqueue_100": 0.9,
            "drain_batch_1w": 0.8,
            "drain_batch_4w": 0.8,
            "replay": 0.8,
        },
    ),
    *_anchored("postgres", "pgqueuer", {"drain_batch_1w": 1.5, "drain_batch_4w": 1.5}),
    Target("postgres", "enqueue_claim_p50", "at_most", 4.0),
    Target("postgres", "notify_wake_p50", "at_most", 3.0),
    *_flat_backlog("postgres"),
    # asyncio: the async API beside the sync one ("alkstore sync") and pgqueuer's async API.
    # Idle threads: "alkstore sync" counts one Store with one listener, and the ratio is
    # sync ÷ async, so >= 1 means the async store's 50 receivers and 4 workers use no more.
    *_anchored("sqlite", "alkstore sync", {"async_enqueue_1": 0.9}),
    *_anchored("postgres", "alkstore sync", {"async_enqueue_1": 0.9, "async_idle_threads": 1.0}),
    *_anchored(
        "postgres",
        "pgqueuer",
        {"async_enqueue_1_32t": 1.5, "async_drain_batch_1w": 1.5, "async_drain_batch_4w": 1.5},
    ),
    Target("postgres", "async_enqueue_claim_p50", "at_most", 2.0),
]


@dataclass(frozen=True)
class Verdict:
    target: Target
    value: float | None
    """The compared number: a ratio (vs_anchor, vs_own) or alkstore's figure (at_most)."""
    holds: bool | None
    """None when a figure it needs is missing (not measured, n/a or an error)."""
    why: str = ""

    def shown(self) -> str:
        if self.holds is None:
            return f"n/a ({self.why})"
        at_most = self.target.kind == "at_most"
        unit = f" {OPERATIONS[self.target.operation].unit}" if at_most else TIMES
        return f"{'yes' if self.holds else 'NO'} ({self.value:.2f}{unit})"


def judge(
    target: Target,
    alkstore: dict[str, float | None],
    ratios: dict[str, dict[str, float | None]],
) -> Verdict:
    """Check ``target`` against alkstore's figures (by operation) and the ratios
    (by operation, then anchor name) of the same run."""
    mine = alkstore.get(target.operation)
    if target.kind == "at_most":
        if mine is None:
            return Verdict(target, None, None, "no alkstore figure")
        return Verdict(target, mine, mine <= target.bound)
    if target.kind == "vs_own":
        reference = alkstore.get(target.versus)
        ratio = mine / reference if mine is not None and reference else None
        missing = "needs both alkstore figures"
    else:
        found = [
            ratio
            for name, ratio in ratios.get(target.operation, {}).items()
            if name.startswith(target.anchor)
        ]
        ratio = found[0] if found else None
        missing = f"needs alkstore's and {target.anchor}'s figures"
    if ratio is None:
        return Verdict(target, None, None, missing)
    return Verdict(target, ratio, ratio >= target.bound)
