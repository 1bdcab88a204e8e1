"""How the dashboard shows names it does not control: exactly, and visibly.

Queue, stream, lock and consumer names are any Unicode text, so a page must
neither let them act on the page (markup, bidirectional overrides that
reorder the text after them) nor hide what they are (two names that differ
by a zero-width space must not look alike). Jinja escapes the markup; these
filters do the rest.
"""

from __future__ import annotations

import unicodedata

from markupsafe import Markup, escape

__all__ = ["exact", "shown", "visible"]

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
"""Controls, formats (zero-width and bidirectional marks), private use,
unassigned, and line or paragraph separators: none shows as itself."""


def visible(text: str) -> str:
    """``text`` with every character that would not show as itself written as
    its escape (``\\u200b``, ``\\x1b``), as ``repr`` writes it. Plain text."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escaped(char) for char in text)


def shown(text: object) -> Markup:
    """A name for a page's text: :func:`visible`, escaped, in a ``<bdi>`` so that
    whatever direction it runs in cannot reorder the text after it."""
    return Markup("<bdi>%s</bdi>") % visible(str(text))


def exact(value: object) -> object:
    """Jinja's ``finalize``: a line break an HTML parser would rewrite (a carriage
    return turns into a line feed) is written as a character reference, so an
    attribute carries a name byte for byte."""
    if type(value) is str and "\r" in value:
        return Markup(str(escape(value)).replace("\r", "&#13;"))
    return value


def _escaped(char: str) -> str:
    if char.isascii():
        return char if char.isprintable() else repr(char)[1:-1]
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
