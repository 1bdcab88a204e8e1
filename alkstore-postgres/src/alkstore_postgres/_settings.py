"""What ``alkstore.open`` accepts for PostgreSQL: the DSN and the engine options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from alkstore.engine import option_seconds

__all__ = ["Settings", "parse_target"]

_ENGINE_OPTIONS = (
    "schema",
    "pool_min_size",
    "pool_max_size",
    "connect_timeout_s",
    "scheduler_lease_s",
)


@dataclass(frozen=True, slots=True)
class Settings:
    """Engine options; each is a keyword of ``alkstore.open`` or a DSN query parameter."""

    schema: str = "alkstore"
    """The one schema the engine owns; separate schemas isolate tenants and tests."""
    pool_min_size: int = 1
    pool_max_size: int = 10
    connect_timeout_s: float = 10.0
    scheduler_lease_s: float = 30.0

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Settings:
        """Check and convert options (DSN strings included).

        Raises:
            TypeError: an unknown option, named.
            ValueError: a bad value, naming the option.
        """
        unknown = sorted(set(options) - set(_ENGINE_OPTIONS))
        if unknown:
            raise TypeError(
                f"the postgres engine has no option {', '.join(map(repr, unknown))} "
                f"(it knows: {', '.join(_ENGINE_OPTIONS)})"
            )
        values: dict[str, Any] = {}
        for name, value in options.items():
            if name == "schema":
                if not isinstance(value, str) or not value or len(value.encode()) > 63:
                    raise ValueError("schema must be a non-empty name of at most 63 bytes")
                values[name] = value
            elif name.startswith("pool_"):
                values[name] = _count(name, value)
            else:
                values[name] = option_seconds(name, value)
        settings = cls(**values)
        if settings.pool_min_size > settings.pool_max_size:
            raise ValueError("pool_min_size must not exceed pool_max_size")
        return settings


def _count(name: str, value: object) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise ValueError(f"{name} must be an int from 1 to 1000, got {value!r}")
    return value


def parse_target(target: str) -> tuple[str, dict[str, str], str]:
    """Split a DSN into what psycopg connects with, the engine options in its
    query string, and ``host:port`` for messages (never the password)."""
    parts = urlsplit(target)
    if parts.scheme.lower() == "postgres":
        parts = parts._replace(scheme="postgresql")
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = {key: value for key, value in query if key in _ENGINE_OPTIONS}
    rest = [(key, value) for key, value in query if key not in _ENGINE_OPTIONS]
    conninfo = urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote)))
    host = parts.hostname or "localhost"
    try:
        port = parts.port or 5432
    except ValueError:
        port = 5432
    return conninfo, options, f"{host}:{port}"
