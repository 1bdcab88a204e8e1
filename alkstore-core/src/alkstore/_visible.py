"""Text that shows what it holds: for names and errors put before people.

Names, payload keys and error messages are anyone's text. Written raw to a
terminal, an escape sequence in one retitles the window or clears the
screen, a carriage return overwrites the line, and a right-to-left override
reorders what follows; on a page, a zero-width space makes two names look
alike. :func:`visible` writes every such character as its escape instead.
"""

from __future__ import annotations

import unicodedata

__all__ = ["json_escaped", "visible"]

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


def json_escaped(json_text: str) -> str:
    """JSON text with every non-ASCII character that would not show as itself
    written as a JSON escape (``\\u009b``; a pair of surrogate escapes past
    U+FFFF): the same JSON, safe to print to a terminal.

    ``json.dumps(..., ensure_ascii=False)`` escapes the C0 controls but writes
    C1 controls (U+009B is a terminal's CSI), bidirectional overrides and line
    separators raw. Such characters appear only inside JSON strings, where an
    escape means the same character.
    """
    if json_text.isascii():
        return json_text
    return "".join(_json_escaped(char) for char in json_text)


def _json_escaped(char: str) -> str:
    if char.isascii() or unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
