"""What ``alkstore.open`` accepts for SQLite: the target and the engine options."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote

from alkstore.engine import option_seconds

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
    """How often the wake watcher checks the file for commits."""
    scheduler_lease_s: float = 30.0
    """TTL of the scheduler leader's lock; it renews every third of it."""

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Settings:
        """Check and convert options (URL strings included).

        Raises:
            TypeError: an unknown option, named.
            ValueError: a bad value, naming the option.
        """
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(
                f"the sqlite engine has no option {', '.join(map(repr, unknown))} "
                f"(it knows: {', '.join(sorted(known))})"
            )
        values: dict[str, Any] = {}
        for name, value in options.items():
            if name == "durability":
                if value not in ("normal", "full"):
                    raise ValueError(f"durability must be 'normal' or 'full', not {value!r}")
                values[name] = value
            else:
                values[name] = option_seconds(name, value)
        return cls(**values)


def parse_target(target: str) -> tuple[str, dict[str, str]]:
    """Return the file path of ``target`` and the options in its query string.

    ``app.db`` and ``/abs/app.db`` are paths as written; ``sqlite:///abs/app.db``
    and ``sqlite://rel/app.db`` are URLs whose query string may carry options.

    Raises:
        ValueError: an in-memory database, a ``file:`` URI, or no path.
    """
    options: dict[str, str] = {}
    path = target
    if target[:9].lower() == "sqlite://":
        rest, _, query = target[9:].partition("?")
        path = unquote(rest)
        options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    in_memory = os.path.basename(path) == ":memory:" or "mode=memory" in target
    if in_memory or path.startswith("file:"):
        raise ValueError(
            f"{target!r}: an in-memory database cannot back an alkstore store, because "
            "wakes come from watching commits to a file that several connections share; "
            "use a file path (a temporary file works for tests)"
        )
    if not path:
        raise ValueError(f"{target!r} names no file: use a path such as 'app.db'")
    return os.path.abspath(path), options
