"""Name rules shared by every entry point of every engine.

Channels, streams, queues, locks, outboxes and schedules share one rule: a
non-empty ``str`` of valid Unicode text that does not start with the reserved
prefix. Names are data: engines bind them as parameters, never interpolate them.
"""

from __future__ import annotations

from typing import Literal

from alkstore._errors import InvalidName, ReservedName

__all__ = [
    "OUTBOX_QUEUE_PREFIX",
    "RECONNECT_CHANNEL",
    "RESERVED_PREFIX",
    "SCHEDULER_LOCK",
    "SCHEDULES_WAKE_KEY",
    "NameKind",
    "check_identifier",
    "check_name",
    "outbox_queue_name",
    "queue_wake_key",
    "stream_wake_key",
]

RESERVED_PREFIX = "__alkstore_"
"""Every name starting with this prefix belongs to alkstore itself."""

RECONNECT_CHANNEL = "__alkstore_listener_reconnected__"
"""Channel of the wake an engine sends every receiver after its listener reconnects."""

SCHEDULER_LOCK = "__alkstore_scheduler"
"""The named lock whose holder is the scheduler leader."""

OUTBOX_QUEUE_PREFIX = "__alkstore_outbox:"
"""Prefix of the queue backing an outbox: ``__alkstore_outbox:{outbox name}``."""

SCHEDULES_WAKE_KEY = "__alkstore_schedules"
"""The wake key of every change to a schedule: the scheduler leader re-reads on it."""

_QUEUE_WAKE_PREFIX = "__alkstore_queue:"
_STREAM_WAKE_PREFIX = "__alkstore_stream:"

NameKind = Literal["channel", "stream", "queue", "lock", "outbox", "schedule"]


def check_name(name: object, kind: NameKind) -> str:
    """Return ``name`` if it is a usable name of ``kind``.

    Raises:
        InvalidName: ``name`` is not a ``str``, is empty, or holds lone surrogates.
        ReservedName: ``name`` starts with ``__alkstore_``.
    """
    if type(name) is str and name and name.isascii() and not name.startswith(RESERVED_PREFIX):
        return name  # the common case, on every hot path: no message built
    checked = check_identifier(name, f"{kind} name")
    if checked.startswith(RESERVED_PREFIX):
        raise ReservedName(
            f"{kind} name {checked!r} starts with the reserved prefix {RESERVED_PREFIX!r}"
        )
    return checked


def check_identifier(value: object, what: str) -> str:
    """Return ``value`` if it is a non-empty ``str`` of valid Unicode text.

    Used for names that are local identifiers rather than shared namespace
    (stream consumers, lock owners, worker ids): no reserved-prefix check.

    Raises:
        InvalidName: naming ``what`` in its message.
    """
    if type(value) is str and value and value.isascii():
        return value
    if not isinstance(value, str):
        raise InvalidName(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidName(f"{what} must not be empty")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidName(
                f"{what} {value!r} is not valid Unicode text (it holds lone surrogates)"
            ) from None
    return value


def outbox_queue_name(outbox: str) -> str:
    """Return the name of the queue backing ``outbox`` (already checked)."""
    return OUTBOX_QUEUE_PREFIX + outbox


def queue_wake_key(queue: str) -> str:
    """The wake key of ``queue``: woken by every commit that makes a job of it
    claimable (an enqueue, a retry, a release)."""
    return _QUEUE_WAKE_PREFIX + queue


def stream_wake_key(stream: str) -> str:
    """The wake key of ``stream``: woken by every commit that publishes to it."""
    return _STREAM_WAKE_PREFIX + stream
