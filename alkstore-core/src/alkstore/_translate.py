"""Turning an engine's driver errors into the contract's ``Database`` error."""

from __future__ import annotations

from types import TracebackType
from typing import ClassVar

from alkstore._errors import Database

__all__ = ["DriverErrors"]


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
        return f"{self.action} failed: {self.describe(exc)}"

    def describe(self, exc: BaseException) -> str:
        """Why, in one line: by default the first line of the driver's message.

        Never let a password through: drivers name none in their errors, but a
        target repeated here must go through ``redact``.
        """
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
