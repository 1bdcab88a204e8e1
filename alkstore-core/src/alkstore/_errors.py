"""The error taxonomy: one root, one class per thing a caller can act on.

"No work", lock contention and dead letters are values or state, never errors.
"""

from __future__ import annotations

__all__ = [
    "Closed",
    "Codec",
    "Database",
    "EngineNotFound",
    "Error",
    "InvalidName",
    "InvalidSpec",
    "LeadershipLost",
    "PayloadTooLarge",
    "ReservedName",
    "StreamTrimmed",
]


class Error(Exception):
    """An alkstore operation failed.

    Every error alkstore raises derives from this class. Raised without a
    message, an error uses the first line of its class docstring.
    """

    def __init__(self, message: str | None = None) -> None:
        if message is None:
            message = (type(self).__doc__ or type(self).__name__).strip().splitlines()[0]
        super().__init__(message)


class PayloadTooLarge(Error, ValueError):
    """The encoded payload is larger than this engine accepts for the operation.

    Raised before anything reaches the database (the PostgreSQL engine limits
    notify payloads to 8,000 encoded bytes). Nothing was written.
    """


class InvalidName(Error, ValueError):
    """The name is not usable: empty, not a string, or not valid Unicode text.

    Nothing was written.
    """


class ReservedName(Error, ValueError):
    """The name starts with the reserved prefix ``__alkstore_``.

    That prefix belongs to alkstore's own channels, locks and queues. Nothing
    was written.
    """


class Closed(Error):
    """The store or transaction handle is closed; open a new one."""


class Codec(Error, ValueError):
    """The value cannot be encoded as, or decoded from, JSON.

    Raised before anything is written; the message names what could not be
    encoded (a set, NaN, a non-string dictionary key, ...).
    """


class Database(Error):
    """The database failed the operation.

    The engine's own exception is chained as ``__cause__``. Whether the
    operation took effect is unknown unless the engine documents otherwise.
    """

    permanent: bool = False
    """Whether trying again cannot help until the store is reopened (the SQLite
    file was replaced under the open store, say). A Worker, Consumer or
    schedule runner rides out an outage, but stops on a permanent error and
    raises it."""


class StreamTrimmed(Error, LookupError):
    """Events the read asked for were trimmed from the stream (``Stream.trim``).

    Raised instead of skipping them silently. ``trimmed_through`` is the
    offset the stream is trimmed through: every event up to it is gone, every
    later one is readable. To skip the gap on purpose, read from there, or
    save it as the consumer's offset
    (``stream.save_offset(consumer, error.trimmed_through)``).
    """

    def __init__(self, stream: str, after: int, trimmed_through: int) -> None:
        super().__init__(
            f"stream {stream!r} is trimmed through offset {trimmed_through}: the events "
            f"after offset {after} up to it are gone; read after {trimmed_through} "
            "(or save it as the consumer's offset) to skip them on purpose"
        )
        self.stream = stream
        """The stream that was read."""
        self.after = after
        """The offset the read asked for events after."""
        self.trimmed_through = trimmed_through
        """The stream's trim record: every event up to this offset is gone."""

    def __reduce__(self) -> tuple[type[StreamTrimmed], tuple[str, int, int]]:
        return type(self), (self.stream, self.after, self.trimmed_through)


class InvalidSpec(Error, ValueError):
    """The schedule spec or its time zone is not one alkstore reads.

    Specs are ``@every <n><unit>`` (n > 0, unit s, m, h or d), five cron fields,
    or ``@hourly``/``@daily``/``@weekly``/``@monthly``; ``ScheduleOpts.tz``
    names an IANA zone, for cron specs only. The message names what is wrong.
    """


class LeadershipLost(Error):
    """The scheduler leader failed to renew its leadership lock.

    Another runner may have taken over; this runner stopped firing schedules.
    """


class EngineNotFound(Error, LookupError):
    """No installed alkstore engine handles this target.

    The message names the distribution to ``pip install``.
    """
