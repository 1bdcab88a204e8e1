"""What ``alkstore.open`` accepts for PostgreSQL: the DSN and the engine options.

A target is a libpq connection string, in either of libpq's own forms: a URL
(``postgresql://`` or ``postgres://``, also SQLAlchemy's
``postgresql+DRIVER://``) or ``key=value`` pairs. libpq parses it: the engine
only takes its own options out of a URL's query string, leaving the rest as
written, and asks libpq whether what remains is valid.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from alkstore.engine import settings_from_options

__all__ = ["POOLERS", "Settings", "parse_target"]

POOLERS = ("none", "transaction")
"""The values of the ``pooler`` option: what sits between the engine and the server."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Engine options; each is a keyword of ``alkstore.open`` or a DSN query parameter."""

    schema: str = "alkstore"
    """The one schema the engine owns; separate schemas isolate tenants and tests."""
    pool_min_size: int = 1
    """Connections the pool keeps open, 1 to 1,000."""
    pool_max_size: int = 10
    """Connections the pool opens at most, 1 to 1,000 (at least ``pool_min_size``)."""
    connect_timeout_s: float = 10.0
    """How long making a connection, or waiting for a pooled one, may take."""
    scheduler_lease_s: float = 30.0
    """TTL of the scheduler leader's lock; it renews every third of it."""
    pooler: Literal["none", "transaction"] = "none"
    """``"transaction"`` when the DSN reaches the server through a pooler in
    transaction mode (PgBouncer's ``pool_mode = transaction``): the engine then
    has psycopg prepare no statement, and needs ``listen_dsn`` for its wakes."""
    listen_dsn: str | None = field(default=None, repr=False)
    """A connection string for the one connection that runs LISTEN (the store's
    wakes), used instead of the DSN: a direct connection to the server when the
    DSN goes through a transaction pooler. Never shown: it may hold a password."""

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Settings:
        """Check and convert options (DSN strings included).

        Raises:
            TypeError: an unknown option, named.
            ValueError: a bad value, naming the option.
        """
        settings = settings_from_options(
            cls,
            "postgres",
            options,
            {
                "schema": _schema_name,
                "pool_min_size": _count,
                "pool_max_size": _count,
                "pooler": _pooler,
                "listen_dsn": _listen_dsn,
            },
        )
        if settings.pool_min_size > settings.pool_max_size:
            raise ValueError("pool_min_size must not exceed pool_max_size")
        if settings.pooler == "transaction" and settings.listen_dsn is None:
            raise ValueError(
                "pooler='transaction' needs listen_dsn: LISTEN does not survive a pooler in "
                "transaction mode (a notification reaches whichever client holds the server "
                "connection then, or nobody), so the store's wakes need a connection string "
                "of their own, straight to the server (or through a session-mode pool), e.g. "
                "alkstore.open(dsn, pooler='transaction', listen_dsn='postgresql://app@db:5432/app')"
            )
        return settings

    def listen_target(self, conninfo: str, address: str) -> tuple[str, str]:
        """What the LISTEN connection connects with, and its address for messages:
        ``listen_dsn`` when given, else the store's own ``conninfo`` and ``address``."""
        if self.listen_dsn is None:
            return conninfo, address
        listen_conninfo, _, listen_address = parse_target(self.listen_dsn)
        return listen_conninfo, listen_address


_ENGINE_OPTIONS = frozenset(field.name for field in dataclasses.fields(Settings))
"""What the engine takes out of a URL's query string: its options, not libpq's."""


def _schema_name(name: str, value: object) -> str:
    if (
        not isinstance(value, str)
        or not value
        or "\x00" in value  # PostgreSQL names cannot hold NUL
        or len(value.encode()) > 63
    ):
        raise ValueError(f"{name} must be a non-empty name of at most 63 bytes, without NUL")
    if value == "information_schema" or value.startswith("pg_"):
        raise ValueError(
            f"{name} {value!r} is one of PostgreSQL's own schemas (information_schema, pg_*): "
            "choose a schema of the application's"
        )
    return value


def _count(name: str, value: object) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise ValueError(f"{name} must be an int from 1 to 1000, got {value!r}")
    return value


def _pooler(name: str, value: object) -> str:
    if value not in POOLERS:
        raise ValueError(
            f"{name} must be 'none' or 'transaction' (a pooler in session mode needs no "
            f"option), got {value!r}"
        )
    return str(value)


def _listen_dsn(name: str, value: object) -> str | None:
    """A connection string libpq accepts, holding no engine option; its text is never
    quoted back (it may hold a password)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a connection string (str), not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must be a PostgreSQL connection string, not empty")
    try:
        _, options, _ = parse_target(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if options:
        raise ValueError(
            f"{name} takes no engine option ({', '.join(sorted(options))}): the LISTEN "
            "connection uses the store's own options; give them to alkstore.open or the DSN"
        )
    return value


_URL_SCHEME = re.compile(r"(?i)postgres(?:ql)?(?:\+[a-z0-9_.\-]+)?://")
_QUOTED = re.compile(r'"[^"]*"')
_UNKNOWN_KEY = re.compile(r'invalid connection option "([^"]*)"')


def parse_target(target: str) -> tuple[str, dict[str, str], str]:
    """Split a target into what libpq connects with, the engine options in a URL's
    query string, and the server's address for messages (never the password).

    Raises:
        ValueError: libpq cannot parse the target, or a ``key=value`` string
            holds an engine option. The message shows none of the target's
            text when the target may hold a password.
    """
    url = _URL_SCHEME.match(target)
    conninfo, options = (
        (target, {})
        if url is None  # libpq's key=value form
        else _take_engine_options("postgresql://" + target[url.end() :])
    )
    params = _libpq_params(conninfo, target)
    return conninfo, options, _address(params, _may_hold_password(target))


def _take_engine_options(url: str) -> tuple[str, dict[str, str]]:
    """The URL without the engine's query parameters, and those parameters decoded.

    Every other character stays as written: libpq alone decodes the rest.
    """
    start = _query_start(url)
    if start < 0:
        return url, {}
    kept: list[str] = []
    options: dict[str, str] = {}
    for part in url[start + 1 :].split("&"):
        key, separator, value = part.partition("=")
        if separator and unquote(key) in _ENGINE_OPTIONS:
            options[unquote(key)] = unquote(value)
        else:
            kept.append(part)
    return url[:start] + ("?" + "&".join(kept) if kept else ""), options


def _query_start(url: str) -> int:
    """Where the query string begins, found as libpq finds it; -1 if none.

    A password may hold a ``?``: libpq reads user information up to the first
    ``@`` that comes before any ``/``, so the search starts after it.
    """
    authority = url.index("://") + 3
    end = authority
    while end < len(url) and url[end] not in "@/":
        end += 1
    return url.find("?", end + 1 if end < len(url) and url[end] == "@" else authority)


def _libpq_params(conninfo: str, target: str) -> dict[str, str]:
    """libpq's reading of ``conninfo``, or a ValueError that hides any password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        unknown = _UNKNOWN_KEY.search(reason)
        if unknown is not None and unknown[1] in _ENGINE_OPTIONS:
            raise ValueError(
                f"the engine option {unknown[1]!r} cannot go in a key=value connection "
                f"string (libpq knows no such key): pass it to alkstore.open as a keyword, "
                f"e.g. alkstore.open(target, {unknown[1]}=...), or use a postgresql:// URL"
            ) from None
        if _may_hold_password(target):
            reason = _QUOTED.sub('"…"', reason)
        raise ValueError(f"not a valid PostgreSQL connection string: {reason}") from None
    return {key: str(value) for key, value in params.items()}


def _may_hold_password(target: str) -> bool:
    """Whether ``target`` may carry a password, so none of its text goes into messages."""
    return "@" in target or "password" in target.lower()


def _address(params: dict[str, str], secretive: bool) -> str:
    """Where libpq will connect, for messages: ``host:port``, a socket path, or several.

    Raises:
        ValueError: a port is not a number, or the host and port lists do not pair up.
    """
    hosts = params.get("host") or params.get("hostaddr") or _env("PGHOST", "PGHOSTADDR")
    host_list = hosts.split(",")
    port_list = (params.get("port") or _env("PGPORT")).split(",")
    _check_ports(port_list, len(host_list), secretive)
    if len(port_list) == 1:
        port_list = port_list * len(host_list)
    pairs = zip(host_list, port_list, strict=True)
    return ", ".join(_one_address(host, port or "5432") for host, port in pairs)


def _check_ports(ports: list[str], hosts: int, secretive: bool) -> None:
    """libpq would refuse these ports only when connecting, quoting the bad one:
    refuse them now, quoting nothing that may be a piece of a password."""
    if len(ports) not in (1, hosts):
        raise ValueError(f"the connection string names {hosts} hosts and {len(ports)} ports")
    for port in ports:
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            shown = "" if secretive else f" {port!r}"
            hint = " (a '/' or '@' in a password is written %2F or %40)" if secretive else ""
            raise ValueError(
                f"the port{shown} in the connection string is not a number from 1 to 65535{hint}"
            )


def _env(*names: str) -> str:
    return next((os.environ[name] for name in names if os.environ.get(name)), "")


def _one_address(host: str, port: str) -> str:
    if not host:
        # libpq's default: its compiled-in socket directory, or localhost on Windows
        return f"localhost:{port}" if sys.platform == "win32" else f"the local socket, port {port}"
    if host.startswith(("/", "@")):
        return f"{host.rstrip('/')}/.s.PGSQL.{port}"
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"
