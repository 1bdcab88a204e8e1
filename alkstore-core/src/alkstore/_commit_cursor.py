"""Reading new rows by an id assigned at insert, without losing those that commit late.

A sequence or auto-increment hands out ids when rows are inserted, but the
rows become visible when their transactions commit, in any order: id 7 may
commit after id 8. A reader that remembers the highest id it has read and
asks for ``id > last`` next time never sees 7 — a lost wake. Ids that never
commit (a rolled-back insert) leave permanent holes, so a reader cannot
simply wait for every hole to fill either. :class:`CommitCursor` waits for
each hole a grace period, re-reading from the oldest one still awaited.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

__all__ = ["CommitCursor"]


class _Gap(NamedTuple):
    """Ids ``first..last`` not seen yet, below one that was, since ``since``."""

    first: int
    last: int
    since: float


class CommitCursor:
    """Where to read from next, and which of the ids read are new, when ids are
    assigned at insert and committed in any order.

    Use it with a query for every id after :attr:`read_after`, in a loop::

        ids = [row.id for row in query("... WHERE id > ?", cursor.read_after)]
        for new_id in cursor.fresh(ids):
            ...  # each committed id comes out once

    :meth:`fresh` records the ids read. An id it has not seen below the
    highest one seen is a gap: an insert that may still commit (an open
    transaction) or never will (a rollback). :attr:`read_after` stays below
    the oldest gap, so every read covers the rows that may yet commit there;
    a gap not filled ``grace_s`` after it opened is given up and the cursor
    moves past it. A row whose insert commits later than that is never
    reported: choose ``grace_s`` longer than the longest time between an
    insert into the table and its commit. While a gap is open, reads
    return rows already seen again (``fresh`` drops them); a longer grace
    costs that much more reading after each rollback.

    The query must return every committed id after :attr:`read_after` (not
    one per group), and the ids must be handed out in insert order, one
    apart: e.g. a PostgreSQL ``bigserial`` (sequence ``CACHE 1``, its
    default) or a MySQL/MariaDB ``AUTO_INCREMENT`` with an increment of 1.
    Ids that skip by design (a per-session sequence cache, a multi-primary
    increment) are gaps that only expire: correct, but every read then
    covers the last ``grace_s`` of rows.

    Start from what is committed when the reader opens (its baseline):
    ``after`` is the newest id inserted more than ``grace_s`` ago, ``seen``
    the committed ids above it. Ids missing among ``seen`` are awaited as
    gaps, so a transaction that inserted before the baseline and commits
    after it is still reported. Starting from the newest committed id alone
    misses those.

    ``clock`` gives seconds on any steady scale (default
    :func:`time.monotonic`); tests pass their own. Not thread-safe: one
    reader owns a cursor.
    """

    def __init__(
        self,
        after: int = 0,
        *,
        seen: Iterable[int] = (),
        grace_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(grace_s) and grace_s >= 0):
            raise ValueError(f"grace_s must be a finite number of seconds >= 0, got {grace_s!r}")
        self._grace_s = grace_s
        self._clock = clock
        self._top = after
        """The highest id seen (or ``after``)."""
        self._gaps: list[_Gap] = []
        """Unseen ids between ``after`` and ``_top``, in id order; as each gap
        opened when a higher id was first seen, ``since`` never decreases."""
        self.fresh(seen)

    @property
    def read_after(self) -> int:
        """Read the ids greater than this one next: every id up to it was seen or given up."""
        return self._gaps[0].first - 1 if self._gaps else self._top

    @property
    def awaited(self) -> int:
        """How many ids below the highest one seen are still awaited."""
        return sum(gap.last - gap.first + 1 for gap in self._gaps)

    def fresh(self, ids: Iterable[int]) -> list[int]:
        """The ids in ``ids`` not seen before, in ascending order; records them.

        Ids at or below :attr:`read_after` and ids seen before are dropped,
        so re-reading rows is harmless. Gaps older than the grace period are
        given up afterwards.
        """
        now = self._clock()
        floor = self.read_after
        new: list[int] = []
        for id_ in sorted(set(ids)):
            if id_ > self._top:
                if id_ > self._top + 1:
                    self._gaps.append(_Gap(self._top + 1, id_ - 1, now))
                self._top = id_
                new.append(id_)
            elif id_ > floor and self._fill(id_):
                new.append(id_)
        self._give_up_old_gaps(now)
        return new

    def __repr__(self) -> str:
        return (
            f"<CommitCursor read_after={self.read_after} top={self._top} "
            f"awaited={self.awaited} in {len(self._gaps)} gaps>"
        )

    def _fill(self, id_: int) -> bool:
        """Remove ``id_`` from the gap that holds it; False when no gap does (seen before)."""
        index = bisect.bisect_right(self._gaps, id_, key=lambda gap: gap.first) - 1
        if index < 0 or self._gaps[index].last < id_:
            return False
        first, last, since = self._gaps[index]
        parts = [_Gap(first, id_ - 1, since), _Gap(id_ + 1, last, since)]
        self._gaps[index : index + 1] = [gap for gap in parts if gap.first <= gap.last]
        return True

    def _give_up_old_gaps(self, now: float) -> None:
        expired = 0
        while expired < len(self._gaps) and now - self._gaps[expired].since >= self._grace_s:
            expired += 1
        del self._gaps[:expired]
