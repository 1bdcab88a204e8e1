"""Text that shows what it holds: for names and errors put before people.

Names, payload keys and error messages are anyone's text. Written raw to a
terminal, an escape sequence in one retitles the window or clears the
screen, a carriage return overwrites the line, and a right-to-left override
reorders what follows; on a page, a zero-width space makes two names look
alike. :func:`visible` writes every such character as its escape instead.
"""

from __future__ import annotations

import unicodedata

__all__ = ["visible"]

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
"""Controls, formats (zero-width and bidirectional marks), private use,
surrogates, unassigned, and line or paragraph separators: none shows as itself."""


def visible(text: str) -> str:
    """``text`` with every character that would not show as itself written as
    its escape (``\\x1b``, ``\\n``, ``\\u200b``), as ``repr`` writes it."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    if char.isascii():
        return char if char.isprintable() else repr(char)[1:-1]
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
