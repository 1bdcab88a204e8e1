"""Finding engines: the ``alkstore.engines`` entry-point group, and ``open``.

Core imports no engine. A target's scheme names the engine (bare paths and
``sqlite://`` → ``sqlite``; ``postgres://``, ``postgresql://``, SQLAlchemy's
``postgresql+psycopg://`` and libpq ``key=value`` strings → ``postgres``;
``NAME://`` → ``NAME``), and only that engine's entry point is loaded.
Lookups are cached: the second ``open`` costs a dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from alkstore._contract import check_contract_version
from alkstore._errors import EngineNotFound

if TYPE_CHECKING:
    from alkstore._store import Store
    from alkstore.engine import Engine

__all__ = [
    "ENTRY_POINT_GROUP",
    "LIBPQ_KEYWORDS",
    "EngineInfo",
    "engine_for_target",
    "engine_name_for",
    "engines",
    "load_engine",
    "open",
    "redact",
]

ENTRY_POINT_GROUP = "alkstore.engines"

_log = logging.getLogger("alkstore")

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
# A first-party scheme without its "//" ("sqlite:", "postgresql:db"): its engine
# refuses the malformed target clearly; it must never become a file of that name.
_BARE_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_SCHEME_ALIASES = {"sqlite": "sqlite", "postgres": "postgres", "postgresql": "postgres"}
# libpq's "key=value ..." connection strings: every word a key=value pair,
# at least one of them a libpq keyword.
_CONNINFO_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)")
LIBPQ_KEYWORDS = frozenset(
    {
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth",
        "channel_binding", "connect_timeout", "client_encoding", "options", "application_name",
        "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
        "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
        "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode",
        "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
        "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service",
        "target_session_attrs", "load_balance_hosts",
    }
)  # fmt: skip
"""libpq's connection keywords: a ``key=value`` target naming one is PostgreSQL's."""
_PASSWORD_PAIR = re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s'&]+)", re.IGNORECASE)
_FIRST_PARTY_DISTRIBUTIONS = {"sqlite": "alkstore-sqlite", "postgres": "alkstore-postgres"}


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """An installed engine, as ``alkstore.engines()`` reports it."""

    name: str
    """The engine's name: what ``--alkstore-engine`` and ``NAME://`` targets use."""
    schemes: tuple[str, ...]
    """The URL schemes the engine opens."""
    distribution: str
    """The distribution that registers the engine, e.g. ``alkstore-sqlite``."""
    version: str
    """That distribution's installed version."""
    contract_version: str = ""
    """The engine contract version the engine was written for."""


class _Registry:
    """The installed engines, read once, loaded on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entry_points: dict[str, EntryPoint] | None = None
        self._loaded: dict[str, Engine] = {}

    def entry_points(self) -> dict[str, EntryPoint]:
        if self._entry_points is None:
            found: dict[str, EntryPoint] = {}
            for entry_point in entry_points(group=ENTRY_POINT_GROUP):
                if entry_point.name in found:
                    _log.warning(
                        "two distributions register the alkstore engine %r; using %s",
                        entry_point.name,
                        _distribution_of(found[entry_point.name]),
                    )
                    continue
                found[entry_point.name] = entry_point
            self._entry_points = found
        return self._entry_points

    def load(self, name: str) -> Engine:
        engine = self._loaded.get(name)
        if engine is not None:
            return engine
        with self._lock:
            engine = self._loaded.get(name)
            if engine is None:
                engine = self._load_uncached(name)
                self._loaded[name] = engine
        return engine

    def _load_uncached(self, name: str) -> Engine:
        from alkstore.engine import Engine  # noqa: PLC0415 - engine imports this module

        entry_point = self.entry_points().get(name)
        if entry_point is None:
            raise EngineNotFound(_not_installed_message(name))
        where = f"{entry_point.value} from {_distribution_of(entry_point)}"
        try:
            engine_class = entry_point.load()
        except (Exception, SystemExit) as exc:  # an engine's import must not end the program
            raise EngineNotFound(
                f"the alkstore engine {name!r} ({where}) is installed but failed to import: {exc!r}"
            ) from exc
        if not (isinstance(engine_class, type) and issubclass(engine_class, Engine)):
            raise EngineNotFound(
                f"the alkstore engine {name!r} ({where}) is not an alkstore.engine.Engine subclass"
            )
        declared = getattr(engine_class, "contract_version", None)
        check_contract_version(declared, name, _distribution_of(entry_point))
        try:
            return engine_class()
        except Exception as exc:
            raise EngineNotFound(
                f"the alkstore engine {name!r} ({where}) failed to start: {exc!r}"
            ) from exc

    def clear(self) -> None:
        with self._lock:
            self._entry_points = None
            self._loaded.clear()


_registry = _Registry()


def engines() -> dict[str, EngineInfo]:
    """Return every installed engine by name.

    An engine whose entry point fails to load is logged and left out rather
    than hiding the others.
    """
    found = {}
    for name, entry_point in sorted(_registry.entry_points().items()):
        try:
            engine = _registry.load(name)
        except EngineNotFound as exc:
            _log.warning("skipping a broken alkstore engine: %s", exc)
            continue
        distribution = entry_point.dist
        found[name] = EngineInfo(
            name=name,
            schemes=tuple(engine.schemes),
            distribution=distribution.name if distribution else "unknown",
            version=distribution.version if distribution else "unknown",
            contract_version=engine.contract_version,
        )
    return found


def load_engine(name: str) -> Engine:
    """Return the installed engine called ``name``.

    Raises:
        EngineNotFound: none is installed (the message says what to install),
            or it failed to import.
    """
    return _registry.load(name)


def engine_name_for(target: str) -> str:
    """Return the name of the engine a target string asks for.

    ``NAME://...`` names the engine ``NAME``; ``postgres``, ``postgresql`` and
    ``sqlite`` are aliases, also with SQLAlchemy's driver suffix
    (``postgresql+psycopg://``). A libpq ``key=value`` connection string asks
    for ``postgres``; anything else is a SQLite file path.
    """
    match = _SCHEME.match(target)
    if match is not None:
        scheme = match[1].lower()
        return _first_party(scheme) or scheme
    bare = _BARE_SCHEME.match(target)
    if bare is not None and (name := _first_party(bare[1].lower())) is not None:
        return name
    if _is_conninfo(target):
        return "postgres"
    return "sqlite"


def _first_party(scheme: str) -> str | None:
    """The first-party engine a scheme names (``postgresql+psycopg`` too), if any."""
    return _SCHEME_ALIASES.get(scheme) or _SCHEME_ALIASES.get(scheme.partition("+")[0])


def _is_conninfo(target: str) -> bool:
    """Whether ``target`` is a libpq ``key=value`` connection string.

    One that opens with such pairs and a libpq keyword among them counts even
    when a malformed part follows (``host=db nonsense``): libpq then says what
    is wrong with it, where a SQLite engine could only say it is no file path.
    """
    keys: list[str] = []
    position = 0
    while position < len(target):
        pair = _CONNINFO_PAIR.match(target, position)
        if pair is None:
            break
        keys.append(pair[1].lower())
        position = pair.end()
    return any(key in LIBPQ_KEYWORDS for key in keys)


def open(target: str | os.PathLike[str], **options: Any) -> Store:
    """Open the store at ``target`` with the engine its scheme names.

    ``alkstore.open("app.db")`` opens a SQLite file (as does any
    ``os.PathLike``); ``alkstore.open("postgresql://user@host/db")`` a
    PostgreSQL database, as does a libpq ``"host=… dbname=…"`` string.
    ``options`` go to the engine (unknown ones raise ``TypeError``).

    Raises:
        EngineNotFound: no installed engine handles ``target``; the message
            names the distribution to ``pip install``.
    """
    engine, target = engine_for_target(target)
    return engine.open(target, **options)


def engine_for_target(target: str | os.PathLike[str]) -> tuple[Engine, str]:
    """The engine that opens ``target``, and the target as a string (see :func:`open`)."""
    if isinstance(target, os.PathLike):
        path = os.fspath(target)
        if isinstance(path, str) and path.strip():
            _refuse_nul(path)
            return load_engine("sqlite"), path
        target = path
    if not isinstance(target, str):
        raise TypeError(f"target must be a str or a path, not {type(target).__name__}")
    if not target.strip():
        raise ValueError(
            f"target must not be empty or blank ({target!r}): give a file path or a URL"
        )
    _refuse_nul(target)
    if target != target.strip():
        raise ValueError(
            f"target {redact(target)!r} begins or ends with white space, as one read from "
            "a file or an environment variable with its line break often does: strip it "
            "(a file whose name has such a space is opened from a path object)"
        )
    return _engine_for(target), target


def _refuse_nul(target: str) -> None:
    if "\x00" in target:
        raise ValueError(
            f"target {redact(target)!r} holds a NUL character, which no file path "
            "or connection string can hold"
        )


def _engine_for(target: str) -> Engine:
    name = engine_name_for(target)
    if name in _registry.entry_points():
        return _registry.load(name)
    # Not a conventional name: an installed engine may still claim the scheme.
    match = _SCHEME.match(target)
    scheme = match[1].lower() if match else None
    for candidate in _registry.entry_points():
        try:
            engine = _registry.load(candidate)
        except EngineNotFound:
            continue
        if scheme in engine.schemes:
            return engine
    raise EngineNotFound(_not_installed_message(name, target))


def _not_installed_message(name: str, target: str | None = None) -> str:
    subject = f"for {redact(target)!r} " if target is not None else ""
    installed = ", ".join(sorted(_registry.entry_points())) or "none"
    distribution = _FIRST_PARTY_DISTRIBUTIONS.get(name)
    if distribution is not None:
        remedy = f"install it with: pip install {distribution}"
    else:
        remedy = (
            f"install the distribution that provides the {name!r} engine "
            f"(it registers under the {ENTRY_POINT_GROUP!r} entry-point group)"
        )
    return (
        f"no alkstore engine {subject}is installed: it needs the {name!r} engine; "
        f"{remedy} (installed engines: {installed})"
    )


def redact(target: str) -> str:
    """``target`` with any password hidden, safe to print.

    In a URL everything between the user name and the last ``@`` of the
    authority is hidden (a password may hold ``/``, ``:`` or ``@``), and so is
    a ``password=`` value in a query string or a libpq ``key=value`` string.
    """
    target = _PASSWORD_PAIR.sub(r"\1***", target)
    scheme = _SCHEME.match(target)
    if scheme is None:
        return target
    rest = target[scheme.end() :]
    authority_end = len(rest.split("?", 1)[0])
    at = rest.rfind("@", 0, authority_end)
    if at < 0:
        return target
    user, colon, _ = rest[:at].partition(":")
    if not colon:
        return target
    return f"{target[: scheme.end()]}{user}:***{rest[at:]}"


def _distribution_of(entry_point: EntryPoint) -> str:
    distribution = entry_point.dist
    return distribution.name if distribution else "an unknown distribution"
