"""What the Worker and the Consumer share: their stats, and calling a handler
that may be a coroutine function from a plain thread."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from alkstore._handler_shapes import check_result

__all__ = ["RunStats", "call_to_completion"]


@dataclass(frozen=True, slots=True)
class RunStats:
    """What a :class:`Worker` or :class:`~alkstore.Consumer` has done since it started."""

    succeeded: int
    """Handler returned and the job was acked (or the event's offset saved)."""
    failed: int
    """Handler raised: the job was retried or dead-lettered (the event is retried)."""
    released: int
    """Given back unfinished at shutdown, for another worker."""
    lost: int
    """The settling call found the claim gone (lapsed, or settled by the handler itself)."""
    in_flight: int
    """Claimed and not yet settled, right now."""
    elapsed_s: float
    """Seconds from the start of the run to these counts."""

    @property
    def handled(self) -> int:
        """Handler runs that finished, whatever their outcome."""
        return self.succeeded + self.failed + self.lost

    @property
    def rate(self) -> float:
        """Handled jobs per second since the start."""
        return self.handled / self.elapsed_s if self.elapsed_s > 0 else 0.0


def call_to_completion(handler: Callable[..., Any], *args: Any) -> None:
    """Call ``handler``; if it returns an awaitable, run it on a fresh event loop.

    Raises:
        TypeError: it returned a generator, whose body never ran (see ``check_result``).
    """
    result = handler(*args)
    check_result(result)
    if inspect.isawaitable(result):
        asyncio.run(_awaited(result))


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
