"""Names as PostgreSQL stores them, and as LISTEN channels.

PostgreSQL text cannot hold NUL, and a LISTEN channel is an identifier of at
most 63 bytes. Stored names escape ``\\`` and NUL (injectively); channels are
a hash of schema and name, and each notification carries the escaped name so
the listener delivers only on an exact match: collisions are never seen. A
name too long for a notification's payload (``pg_notify`` takes fewer than
8,000 bytes) is carried as its SHA-256 digest, which the listener maps back to
the name of a receiver it holds (:func:`wake_payload`).
"""

from __future__ import annotations

import functools
import hashlib

__all__ = [
    "DIGEST_TAG",
    "channel_identifier",
    "stored",
    "unstored",
    "wake_params",
    "wake_payload",
]

_PAYLOAD_LIMIT = 7_000
"""Bytes a name may take in a notification's payload: ``pg_notify`` refuses
8,000 or more, and a user's notify adds a tag and a serial number."""
DIGEST_TAG = "\\$"  # no stored name starts so: ``stored`` doubles every backslash


def stored(text: str) -> str:
    """``text`` as a PostgreSQL text value."""
    if "\\" not in text and "\x00" not in text:
        return text
    return text.replace("\\", "\\\\").replace("\x00", "\\0")


def unstored(text: str) -> str:
    """The inverse of :func:`stored`."""
    if "\\" not in text:
        return text
    out, chars = [], iter(text)
    for char in chars:
        if char == "\\":
            follower = next(chars, "")
            out.append("\x00" if follower == "0" else follower)
        else:
            out.append(char)
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def channel_identifier(schema: str, key: str) -> str:
    """The LISTEN/NOTIFY channel for ``key`` in ``schema``: 44 ASCII characters."""
    digest = hashlib.blake2b(f"{schema}\x00{key}".encode(), digest_size=20).hexdigest()
    return f"alk_{digest}"


def wake_params(
    schema: str, key: str, channel: str = "channel", payload: str = "key"
) -> dict[str, str]:
    """Bind parameters for ``pg_notify`` that wake ``key``'s receivers in ``schema``.

    For the engine's own wakes (queues, streams, schedules): equal ones in one
    transaction reach listeners once, as one wake says all there is to say.
    """
    return {channel: channel_identifier(schema, key), payload: wake_payload(key)}


def wake_payload(key: str) -> str:
    """What a notification carries to name ``key``: its stored form, or past the
    payload's limit, :data:`DIGEST_TAG` and the key's SHA-256 digest."""
    text = stored(key)
    if len(text) * 4 <= _PAYLOAD_LIMIT or len(text.encode()) <= _PAYLOAD_LIMIT:
        return text
    return DIGEST_TAG + hashlib.sha256(key.encode()).hexdigest()
