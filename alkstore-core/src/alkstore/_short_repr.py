"""Reprs that stay short: a value type's fields, each clipped.

A payload can be megabytes and a name thousands of characters; a debugger,
a log line or a failed assertion that prints a ``JobInfo`` should show its
shape, not all of it. ``reprlib`` clips each container and string on the way
down, so the repr's length is bounded whatever the value holds.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any

__all__ = ["dataclass_repr", "short_repr"]


def _clipper() -> reprlib.Repr:
    clipper = reprlib.Repr()
    clipper.maxlevel = 3
    clipper.maxdict = clipper.maxlist = clipper.maxtuple = 8
    clipper.maxset = clipper.maxfrozenset = clipper.maxdeque = clipper.maxarray = 8
    clipper.maxstring = clipper.maxother = 120
    clipper.maxlong = 40
    return clipper


_CLIPPER = _clipper()


def short_repr(value: Any) -> str:
    """``repr(value)`` with long strings and containers clipped (``...`` marks where)."""
    return _CLIPPER.repr(value)


def dataclass_repr(self: Any) -> str:
    """A dataclass's repr as ``dataclasses`` writes it, each field's value clipped.

    Assign it as ``__repr__`` in the class body: ``@dataclass`` keeps a
    ``__repr__`` the class defines.
    """
    shown = ", ".join(
        f"{field.name}={short_repr(getattr(self, field.name))}"
        for field in dataclasses.fields(self)
        if field.repr
    )
    return f"{type(self).__name__}({shown})"
