"""What ``alkstore.open`` accepts for SQLite: the target and the engine options."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote

from alkstore.engine import LIBPQ_KEYWORDS, settings_from_options

__all__ = ["Settings", "parse_target"]

Durability = Literal["normal", "full"]


@dataclass(frozen=True, slots=True)
class Settings:
    """Engine options; each is a keyword of ``alkstore.open`` or a URL query parameter."""

    durability: Durability = "normal"
    """``normal``: WAL with ``synchronous=NORMAL`` (a power cut may lose the last
    commits, never corrupt the file); ``full``: ``synchronous=FULL``."""
    busy_timeout_s: float = 5.0
    """How long a write waits for another writer before raising ``Database``."""
    watch_interval_s: float = 0.001
    """The shortest gap between two looks of the wake watcher at the file. With
    inotify (Linux) a commit wakes the watcher, which then looks at most this
    often (a backup poll runs every max(watch_interval_s, 0.5 s)); without
    inotify the watcher polls at this interval."""
    scheduler_lease_s: float = 30.0
    """TTL of the scheduler leader's lock; it renews every third of it."""

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Settings:
        """Check and convert options (URL strings included).

        Raises:
            TypeError: an unknown option, named.
            ValueError: a bad value, naming the option.
        """
        return settings_from_options(cls, "sqlite", options, {"durability": _durability})


def _durability(name: str, value: object) -> Durability:
    if value == "normal":
        return "normal"
    if value == "full":
        return "full"
    raise ValueError(f"{name} must be 'normal' or 'full', not {value!r}")


def parse_target(target: str) -> tuple[str, dict[str, str]]:
    """Return the absolute path of the file ``target`` names, and its URL options.

    Accepted forms (SQLAlchemy's and dj-database-url's convention):

    - a path as written, relative to the working directory or absolute:
      ``app.db``, ``/srv/app.db``;
    - ``sqlite:///relative.db`` (relative to the working directory) and
      ``sqlite:////abs/path.db`` (absolute), with engine options as a query
      string (``?durability=full``); ``sqlite+<driver>://`` (SQLAlchemy's
      ``sqlite+pysqlite``, ``sqlite+aiosqlite``) reads the same.

    Nothing here touches the filesystem: a refused target never creates a file.

    Raises:
        ValueError: any other ``sqlite:`` form (``sqlite://host/x``,
            ``sqlite://``, ``sqlite:``, ``sqlite:/x``, ``sqlite:x``), an
            in-memory database, a ``file:`` URI, a PostgreSQL ``key=value``
            connection string (the message never repeats it: it may hold a
            password), no path at all, or a path written as a folder
            (``data/``, ``.``, ``..``). The message lists the accepted forms.
    """
    if _is_conninfo(target):
        raise ValueError(_CONNINFO_REFUSED)
    options: dict[str, str] = {}
    path = target
    scheme = _SQLITE_SCHEME.match(target)
    if scheme is not None:
        path, options = _parse_url(scheme[0], target[scheme.end() :])
    _refuse_in_memory(target, path)
    if _is_conninfo(path):
        raise ValueError(_CONNINFO_REFUSED)
    if not path:
        raise ValueError(f"{target!r} names no file; {_ACCEPTED_FORMS}")
    _refuse_folder_form(target, path)
    return os.path.abspath(path), options


def _refuse_folder_form(target: str, path: str) -> None:
    """Refuse ``data/``, ``.`` and ``..``: written as folders, whether or not they exist.

    ``os.path.abspath`` would drop the trailing separator, and the store would
    create a file where the caller meant a folder.
    """
    separators = (os.sep, os.altsep) if os.altsep else (os.sep,)
    if path.endswith(separators) or os.path.basename(path) in (".", ".."):
        raise ValueError(
            f"{target!r} names a folder, not a file; give the path of a database file "
            f"in it, such as {os.path.join(path, 'app.db')!r}"
        )


_ACCEPTED_FORMS = (
    "a SQLite target is a file path ('app.db', '/srv/app.db') or a URL in SQLAlchemy's form: "
    "'sqlite:///relative.db' (relative to the working directory) or "
    "'sqlite:////abs/path.db' (absolute), options as a query string ('?durability=full')"
)

# "sqlite:" and SQLAlchemy's "sqlite+driver:", any case; a bare path never starts so.
_SQLITE_SCHEME = re.compile(r"sqlite(?:\+[^:/?#]*)?:", re.IGNORECASE)

# libpq's connection keywords: a target starting "keyword=" is a PostgreSQL
# connection string, never meant as a file name (and it may hold a password).
_CONNINFO_START = re.compile(rf"\s*(?:{'|'.join(sorted(LIBPQ_KEYWORDS))})\s*=", re.IGNORECASE)
_PASSWORD_PAIR = re.compile(r"\spassword\s*=", re.IGNORECASE)
_CONNINFO_REFUSED = (
    "this target is a PostgreSQL key=value connection string, not a SQLite file: open it "
    "with the postgres engine (alkstore-postgres installed), e.g. as a URL "
    "'postgresql://user@host/db'; a file whose name really starts that way is reached "
    "through its folder: './name'"
)


def _is_conninfo(text: str) -> bool:
    """Starts like a libpq connection string, or carries a ``password=`` word."""
    return _CONNINFO_START.match(text) is not None or _PASSWORD_PAIR.search(text) is not None


def _parse_url(scheme: str, rest: str) -> tuple[str, dict[str, str]]:
    """Split what follows ``sqlite:`` into a path and options; refuse any other form.

    The messages name the scheme, never the rest: a mistyped URL may hold a password.
    """
    if not rest.startswith("//"):
        raise ValueError(f"a {scheme!r} URL must start '{scheme}///': {_ACCEPTED_FORMS}")
    location, _, query = rest[2:].partition("?")
    host, slash, path = location.partition("/")
    if host:
        raise ValueError(
            f"a {scheme!r} URL names no host: write three slashes before a relative path "
            f"and four before an absolute one; {_ACCEPTED_FORMS}"
        )
    if not slash:
        raise ValueError(f"'{scheme}//' names no file; {_ACCEPTED_FORMS}")
    options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    return unquote(path), options


def _refuse_in_memory(target: str, path: str) -> None:
    in_memory = os.path.basename(path) == ":memory:" or path.startswith("file::memory:")
    if in_memory or "mode=memory" in target:
        raise ValueError(
            f"{target!r}: an in-memory database cannot back an alkstore store, because "
            "wakes come from watching commits to a file that several connections share; "
            "use a file path (a temporary file works for tests)"
        )
    if path.startswith("file:"):
        raise ValueError(
            f"{target!r}: SQLite 'file:' URIs are not accepted (their parameters could "
            f"change what the store relies on); {_ACCEPTED_FORMS}"
        )
