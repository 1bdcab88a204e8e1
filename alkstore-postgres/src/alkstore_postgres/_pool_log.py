"""psycopg_pool's per-attempt warnings about alkstore's own pools, turned down to DEBUG.

During an outage the pool logs a WARNING for every failed reconnect attempt,
every attempt it gives up on and every dead connection it discards: a dozen
lines for five seconds down. alkstore's runners already log one warning per
outage (and an info line when it ends), so for the pools alkstore made these
records become DEBUG, shown only where ``psycopg.pool`` is turned up to it.
Other pools in the process are left as they are.
"""

from __future__ import annotations

import itertools
import logging
import threading

__all__ = ["POOL_NAME_PREFIX", "pool_name", "quiet_pool_noise"]

POOL_NAME_PREFIX = "alkstore-"
"""Every pool alkstore makes is named so (``alkstore-1``, ...)."""

_NOISE = frozenset(
    {
        "error connecting in %r: %s",
        "discarding closed connection: %s",
        "discarding broken connection: %s",
        "reconnection attempt in pool %r failed after %s sec",
    }
)
_numbers = itertools.count(1)
_installed = False
_install_lock = threading.Lock()


def pool_name() -> str:
    """A new name for a pool of alkstore's."""
    return f"{POOL_NAME_PREFIX}{next(_numbers)}"


class _DemoteOwnPoolNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.msg in _NOISE and _ours(record):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            # The logger let it through as a WARNING; as DEBUG it goes on only where
            # DEBUG is on (handlers of their own level, NOTSET, would show it all).
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _ours(record: logging.LogRecord) -> bool:
    """Whether the record is about a pool alkstore made (named, or owning the connection)."""
    if not isinstance(record.args, tuple) or not record.args:
        return False
    subject = record.args[0]
    name = (
        subject
        if isinstance(subject, str)
        else getattr(getattr(subject, "_pool", None), "name", None)
    )
    return isinstance(name, str) and name.startswith(POOL_NAME_PREFIX)


def quiet_pool_noise() -> None:
    """Install the filter on the ``psycopg.pool`` logger, once per process."""
    global _installed  # noqa: PLW0603 - one filter per process, however many stores
    with _install_lock:
        if not _installed:
            logging.getLogger("psycopg.pool").addFilter(_DemoteOwnPoolNoise())
            _installed = True
