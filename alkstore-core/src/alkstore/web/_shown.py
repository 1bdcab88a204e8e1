"""How the dashboard shows names it does not control: exactly, and visibly.

Queue, stream, lock and consumer names are any Unicode text, so a page must
neither let them act on the page (markup, bidirectional overrides that
reorder the text after them) nor hide what they are (two names that differ
by a zero-width space must not look alike). Jinja escapes the markup; these
filters do the rest.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from alkstore._visible import visible

__all__ = ["exact", "shown", "visible"]


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
