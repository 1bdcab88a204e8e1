"""What a consumer does once its handler ran on a batch: the one rule both of its runs follow."""

from __future__ import annotations

from dataclasses import dataclass

from alkstore._values import StreamEvent

__all__ = ["BatchVerdict", "Overtaken", "check_offset_saved", "is_fatal", "judge_batch"]


@dataclass(frozen=True)
class BatchVerdict:
    """What to do once the handler ran on a batch's events in order (not transactional)."""

    save: int | None
    """The last handled offset, to save; None if no event was handled."""
    handled: int
    """How many of the batch's events that offset covers."""
    fatal: BaseException | None
    """Raised, and not an ``Exception``: save ``save`` once (if the database lets us), re-raise."""
    failure: BaseException | None
    """An ``Exception`` raised: after saving, pause and retry from the first unsaved event."""


def judge_batch(
    batch: list[StreamEvent], handled: int | None, raised: BaseException | None
) -> BatchVerdict:
    """The verdict on ``batch``: events up to offset ``handled`` returned, then ``raised``."""
    count = 0 if handled is None else _count_upto(batch, handled)
    if raised is not None and is_fatal(raised):
        return BatchVerdict(handled, count, fatal=raised, failure=None)
    return BatchVerdict(handled, count, fatal=None, failure=raised)


def is_fatal(raised: BaseException) -> bool:
    """A handler raised ``raised``: True if it ends the run (not an ``Exception``:
    ``SystemExit``, ``KeyboardInterrupt``), False if the events are retried.

    A transactional batch's transaction is rolled back either way."""
    return not isinstance(raised, Exception)


def _count_upto(batch: list[StreamEvent], offset: int) -> int:
    return sum(1 for event in batch if event.offset <= offset)


class Overtaken(Exception):
    """A transactional batch found its consumer's saved offset already at or past
    its end: another run of the same consumer handled it."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"the saved offset is already at or past {offset}")
        self.offset = offset
        """The batch's last offset."""


def check_offset_saved(saved: bool, offset: int) -> None:
    """Raise :class:`Overtaken` unless the batch's offset save advanced the offset."""
    if not saved:
        raise Overtaken(offset)
