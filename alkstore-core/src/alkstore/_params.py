"""Portable parameters for ``tx.execute``: ``:name`` with a mapping, on every engine.

Business SQL written once, as SQLAlchemy's ``text()`` writes it
(``"INSERT INTO orders VALUES (:id, :total)"``, ``{"id": 1, "total": 2.5}``),
is rewritten into the engine's own DB-API ``paramstyle`` before it reaches
the driver. The scanner knows what is not a parameter: string literals
(``'…'`` with ``''``, PostgreSQL's ``E'…'`` with backslash escapes and
``$tag$…$tag$``), quoted identifiers, ``--`` and (nested) ``/* */``
comments, the ``::`` cast, a colon right after a word character (``a[1:n]``,
``x:y``) and, as in SQLAlchemy, a colon escaped as ``\\:``.

SQL given with a sequence, or with a mapping but no ``:name`` in it, is the
engine's native style and passes through untouched; ``:name`` SQL given a
sequence is refused (sqlite3 would bind it by position, psycopg not at all).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

__all__ = ["PARAMSTYLES", "Paramstyle", "portable_params"]

Paramstyle = Literal["named", "pyformat", "qmark", "format", "numeric"]
PARAMSTYLES: tuple[Paramstyle, ...] = ("named", "pyformat", "qmark", "format", "numeric")

# Where something that is not plain SQL text may begin.
_SPECIAL = re.compile(r"""--|/\*|[eE]'|'|"|\$|::|\\:|:""")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")
_WORD_CHAR = re.compile(r"[\w$]")


class _Template:
    """SQL cut into text pieces around its ``:name`` parameters."""

    __slots__ = ("names", "texts")

    def __init__(self, texts: list[str], names: list[str]) -> None:
        self.texts = texts  # len(texts) == len(names) + 1
        self.names = names

    def render(self, style: Paramstyle) -> str:
        escape = style in ("pyformat", "format")
        out = [_escape_percent(self.texts[0], escape)]
        numbers: dict[str, int] = {}
        for name, text in zip(self.names, self.texts[1:], strict=True):
            out.append(_placeholder(style, name, numbers))
            out.append(_escape_percent(text, escape))
        return "".join(out)


def portable_params(
    sql: str, params: Sequence[Any] | Mapping[str, Any], style: Paramstyle
) -> tuple[str, Sequence[Any] | Mapping[str, Any]]:
    """``(sql, params)`` for a driver of ``style``, from portable ``:name`` SQL.

    Raises:
        ValueError: the SQL names a parameter that ``params`` does not hold.
        TypeError: the SQL names parameters and ``params`` is a sequence.
    """
    if not isinstance(params, Mapping):
        if names := _scan(sql).names:
            shown = ", ".join(":" + name for name in dict.fromkeys(names))
            raise TypeError(
                f"tx.execute: the SQL names {shown}: give params as a mapping of those "
                f"names, which every engine binds; a {type(params).__name__} binds only "
                "the engine's own placeholders"
            )
        return sql, params
    template = _scan(sql)
    if not template.names and template.texts[0] == sql:
        return sql, params  # the engine's native style (or no parameter at all)
    missing = [name for name in dict.fromkeys(template.names) if name not in params]
    if missing:
        held = ", ".join(map(str, params)) or "nothing"
        raise ValueError(
            f"tx.execute: the SQL names {', '.join(':' + name for name in missing)}, "
            f"which params does not hold (it holds {held})"
        )
    rendered = _render(sql, style)
    if style in ("named", "pyformat"):
        return rendered, {name: params[name] for name in template.names}
    if style == "numeric":
        return rendered, [params[name] for name in dict.fromkeys(template.names)]
    return rendered, [params[name] for name in template.names]


@functools.lru_cache(maxsize=512)
def _render(sql: str, style: Paramstyle) -> str:
    return _scan(sql).render(style)


@functools.lru_cache(maxsize=512)
def _scan(sql: str) -> _Template:
    texts: list[str] = []
    names: list[str] = []
    piece: list[str] = []  # the text since the last parameter
    at = 0
    while (found := _SPECIAL.search(sql, at)) is not None:
        start, token = found.start(), found.group()
        piece.append(sql[at:start])
        if token == ":":
            name = _NAME.match(sql, start + 1)
            if name is None or (start > 0 and _WORD_CHAR.match(sql[start - 1])):
                piece.append(token)
                at = start + 1
                continue
            texts.append("".join(piece))
            piece = []
            names.append(name.group())
            at = name.end()
            continue
        end = _skip(sql, start, token)
        piece.append(":" if token == "\\:" else sql[start:end])
        at = end
    piece.append(sql[at:])
    texts.append("".join(piece))
    return _Template(texts, names)


def _skip(sql: str, start: int, token: str) -> int:
    """Where the literal, comment or other non-parameter at ``start`` ends."""
    skipper = _SKIPPERS.get(token)
    return start + len(token) if skipper is None else skipper(sql, start)  # "::", "\\:"


def _end_of_line_comment(sql: str, start: int) -> int:
    newline = sql.find("\n", start)
    return len(sql) if newline < 0 else newline + 1


def _end_of_string(sql: str, start: int) -> int:
    return _end_of_quoted(sql, start + 1, "'", backslashes=False)


def _end_of_quoted_identifier(sql: str, start: int) -> int:
    return _end_of_quoted(sql, start + 1, '"', backslashes=False)


def _end_of_escape_string(sql: str, start: int) -> int:
    # After a word character the e ends an identifier ("some'…"): a plain string.
    plain = start > 0 and _WORD_CHAR.match(sql[start - 1]) is not None
    return _end_of_quoted(sql, start + 2, "'", backslashes=not plain)


def _end_of_quoted(sql: str, at: int, quote: str, *, backslashes: bool) -> int:
    while at < len(sql):
        char = sql[at]
        if backslashes and char == "\\":
            at += 2
        elif char == quote:
            if sql.startswith(quote, at + 1):  # a doubled quote stands for itself
                at += 2
            else:
                return at + 1
        else:
            at += 1
    return len(sql)  # unterminated: the rest is the literal, as the database will say


def _end_of_block_comment(sql: str, start: int) -> int:
    depth, at = 0, start
    while at < len(sql):
        if sql.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif sql.startswith("*/", at):
            depth, at = depth - 1, at + 2
            if depth == 0:
                return at
        else:
            at += 1
    return len(sql)


def _end_of_dollar_quoted(sql: str, start: int) -> int:
    if start > 0 and _WORD_CHAR.match(sql[start - 1]):
        return start + 1  # inside an identifier such as a$b
    tag = _DOLLAR_TAG.match(sql, start)
    if tag is None:
        return start + 1  # $1, a positional parameter, or a lone $
    close = sql.find(tag.group(), tag.end())
    return len(sql) if close < 0 else close + len(tag.group())


_SKIPPERS: dict[str, Callable[[str, int], int]] = {
    "--": _end_of_line_comment,
    "/*": _end_of_block_comment,
    "'": _end_of_string,
    '"': _end_of_quoted_identifier,
    "e'": _end_of_escape_string,
    "E'": _end_of_escape_string,
    "$": _end_of_dollar_quoted,
}


def _escape_percent(text: str, escape: bool) -> str:
    return text.replace("%", "%%") if escape else text


def _placeholder(style: Paramstyle, name: str, numbers: dict[str, int]) -> str:
    if style == "named":
        return f":{name}"
    if style == "pyformat":
        return f"%({name})s"
    if style == "qmark":
        return "?"
    if style == "format":
        return "%s"
    number = numbers.setdefault(name, len(numbers) + 1)
    return f":{number}"
