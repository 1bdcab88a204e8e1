"""Turning an engine's driver errors into the contract's ``Database`` error."""

from __future__ import annotations

from types import TracebackType
from typing import ClassVar

from alkstore._errors import Database

__all__ = ["DriverErrors", "shortened"]

_LONGEST_ACTION = 2_000
"""Characters of an action named whole in a message: past the names every engine
must take (1,000 characters), a message keeps the head and the tail of a name."""


class DriverErrors:
    """``with translate("enqueue into 'q'"): ...`` re-raises the driver's errors
    as ``Database("enqueue into 'q' failed: <why>")``, the driver's error chained.

    An engine subclasses it once, naming its driver's exception types in
    ``driver_errors`` and, if the first line of the driver's message is not
    the best explanation, overriding :meth:`describe`. A class rather than a
    generator-based context manager: it wraps every statement, and entering
    it must cost next to nothing.
    """

    __slots__ = ("action",)

    driver_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    """The exception types this engine's driver raises."""

    def __init__(self, action: str) -> None:
        self.action = action
        """What the wrapped statements do, named in the ``Database`` error's message."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and isinstance(exc, self.driver_errors):
            raise Database(self.message(exc)) from exc

    def message(self, exc: BaseException) -> str:
        """The ``Database`` error's message: what failed, and why."""
        return f"{shortened(self.action)} failed: {self.describe(exc)}"

    def describe(self, exc: BaseException) -> str:
        """Why, in one line: by default the first line of the driver's message.

        Never let a password through: drivers name none in their errors, but a
        target repeated here must go through ``redact``.
        """
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__


def shortened(text: str) -> str:
    """``text``, or past :data:`_LONGEST_ACTION` characters its head and tail
    around how much was left out: a 100,000-character name makes no
    100,000-character error message."""
    if len(text) <= _LONGEST_ACTION:
        return text
    head, tail = text[:1_000], text[-200:]
    return f"{head}…[{len(text) - len(head) - len(tail):,} characters]…{tail}"
