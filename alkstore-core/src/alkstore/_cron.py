"""Cron specs: five fields or ``@hourly``/``@daily``/``@weekly``/``@monthly``, in a time zone.

A cron schedule's boundaries are wall-clock times in its zone (IANA, via
``zoneinfo``; UTC by default), computed here, in core, so every engine fires
the same instants. The fields are matched by ``cronsim`` on naive local times;
turning those into instants, across daylight-saving changes, is ours:

- every local time the fields match fires once;
- a local time that does not exist that day (the clocks jumped over it) fires
  once, at the first instant after the jump; several such times of one gap,
  and a match at the gap's end, are that one fire;
- a local time that occurs twice (the clocks went back) fires once, at its
  first occurrence.

So a schedule's boundaries are one fixed, strictly increasing set of instants:
:meth:`CronSpec.next_after` gives the first one after any instant.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Final

from alkstore._errors import InvalidSpec

__all__ = [
    "MACROS",
    "CronSpec",
    "check_tz",
    "is_cron",
    "parse_cron",
    "zone",
]

MACROS: Final = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
}
"""The named specs, and the five fields each stands for."""

_FIELDS: Final = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT, 0 and 7 both Sunday"),
)
_VALUE = r"(?:[0-9]{1,2}|[A-Za-z]{3})"
_ITEM = rf"(?:(?:\*|{_VALUE}-{_VALUE})(?:/[0-9]{{1,2}})?|{_VALUE})"
_FIELD = re.compile(rf"{_ITEM}(?:,{_ITEM})*", re.ASCII)
_SEPARATOR = re.compile(r"[ \t]+")

_NOT_PORTABLE = frozenset({"localtime"})
"""Zone keys that name the host's own setting rather than one zone."""


def is_cron(spec: str) -> bool:
    """Whether ``spec`` is meant as a cron spec (it may still be invalid)."""
    return not spec.startswith("@every")


def zone(tz: str | None) -> tzinfo:
    """The time zone ``tz`` names (a checked key), UTC for None."""
    if tz is None:
        return timezone.utc
    from zoneinfo import ZoneInfo  # noqa: PLC0415 - only cron schedules in a zone need it

    return ZoneInfo(tz)


def check_tz(tz: object) -> str:
    """Return ``tz`` if it is an IANA time zone key this host knows.

    Keys are exact (``"Europe/Berlin"``, ``"UTC"``, ``"America/Argentina/Salta"``):
    a spelling only a case-insensitive file system finds, the host's
    ``localtime`` and the ``posix/``/``right/`` trees are refused, so a key
    that works on one machine works on every machine with the same zone data.

    Raises:
        InvalidSpec: ``tz`` is not a str, or names no zone (the message
            suggests the nearest keys).
    """
    if not isinstance(tz, str):
        raise InvalidSpec(f"tz must be an IANA time zone name (a str), not {type(tz).__name__}")
    known = _known_zones()
    if tz in known:
        return tz
    import difflib  # noqa: PLC0415 - only for the message

    close = difflib.get_close_matches(tz, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise InvalidSpec(
        f"tz {tz!r} is not an IANA time zone this host knows (e.g. 'Europe/Berlin', "
        f"'America/New_York', 'UTC'){hint}"
    )


@functools.cache
def _known_zones() -> frozenset[str]:
    import zoneinfo  # noqa: PLC0415

    return frozenset(zoneinfo.available_timezones()) - _NOT_PORTABLE


@dataclass(frozen=True, slots=True, eq=False)
class CronSpec:
    """A parsed cron spec in its zone: the boundary arithmetic of one schedule."""

    spec: str
    """The spec as given (``"0 3 * * *"``, ``"@daily"``)."""
    tz: str | None
    """The zone key as given; None is UTC."""
    fields: str
    """The five fields the spec stands for."""
    zone: tzinfo

    def next_after(self, instant: float) -> float:
        """The first boundary later than ``instant`` (Unix seconds).

        Raises:
            InvalidSpec: the spec matches no time in the 50 years after ``instant``.
        """
        from cronsim import CronSim  # noqa: PLC0415 - cron specs only

        local = datetime.fromtimestamp(instant, self.zone).replace(tzinfo=None, microsecond=0)
        # Local times before ``local`` map to instants at or before ``instant``
        # (the mapping never goes back), so the search starts at ``local``.
        try:
            for wall in CronSim(self.fields, local):
                boundary = _instant(wall, self.zone)
                if boundary > instant:
                    return boundary
        except OverflowError:
            pass
        raise InvalidSpec(f"schedule spec {self.spec!r} matches no time after {local} (local)")


def _instant(wall: datetime, zone: tzinfo) -> float:
    """The instant a matching local time fires at: itself, its first occurrence
    when it occurs twice, or the end of the gap when the clocks skipped it."""
    first = wall.replace(tzinfo=zone, fold=0)
    if first.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None) == wall:
        return first.timestamp()
    # In a gap: fold=0 reads it with the offset before the jump (a later
    # instant), fold=1 with the offset after it (an earlier one). The jump is
    # between them: the first whole second whose local time is past ``wall``.
    low = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    high = int(first.timestamp())
    low, high = min(low, high), max(low, high)
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).replace(tzinfo=None) > wall:
            high = middle
        else:
            low = middle
    return float(high)


def parse_cron(spec: str, tz: str | None) -> CronSpec:
    """Parse a cron spec for zone ``tz`` (an IANA key, or None for UTC).

    The grammar: five fields separated by spaces or tabs — minute, hour,
    day-of-month, month, day-of-week — each a ``*``, a value, a range
    ``a-b``, ``*/s`` or ``a-b/s``, or a comma-separated list of these; months
    and days of the week may be names (``JAN``, ``mon``). When both the
    day-of-month and the day-of-week are restricted (neither starts with
    ``*``), a day matching either fires, as in Vixie cron. Or one of
    ``@hourly``, ``@daily``, ``@weekly``, ``@monthly``.

    Raises:
        InvalidSpec: anything else, naming the field that is wrong, a spec
            that can never fire (``0 0 30 2 *``), or a zone this host does not
            know (a runner reading a schedule stored elsewhere checks it too).
    """
    return _parse_cached(spec, tz)


@functools.lru_cache(maxsize=256)
def _parse_cached(spec: str, tz: str | None) -> CronSpec:
    fields = MACROS.get(spec, spec)
    if fields.startswith("@"):
        raise InvalidSpec(
            f"schedule spec {spec!r} is not one of '@every <n><unit>', "
            f"{', '.join(map(repr, MACROS))} or five cron fields"
        )
    if not fields:
        raise InvalidSpec("schedule spec is empty")
    if fields != fields.strip(" \t"):
        raise InvalidSpec(f"schedule spec {spec!r} starts or ends with blanks")
    parts = _SEPARATOR.split(fields)
    if len(parts) != len(_FIELDS):
        raise InvalidSpec(
            f"schedule spec {spec!r} has {len(parts)} field{'s' if len(parts) != 1 else ''}; "
            "a cron spec has five: minute hour day-of-month month day-of-week "
            "(seconds and years are not supported); the other specs are "
            f"'@every <n><unit>' and {', '.join(map(repr, MACROS))}"
        )
    for text, (name, values) in zip(parts, _FIELDS, strict=True):
        if _FIELD.fullmatch(text) is None:
            raise InvalidSpec(_bad_field(spec, name, text, values))
    from cronsim import CronSim, CronSimError  # noqa: PLC0415 - cron specs only

    anchor = datetime(2000, 1, 1)  # fields are matched on naive local times
    try:
        first = next(CronSim(fields, anchor), None)
    except CronSimError as exc:
        raise InvalidSpec(_cronsim_message(spec, parts, str(exc))) from None
    if first is None:
        raise InvalidSpec(f"schedule spec {spec!r} never fires (no day matches its fields)")
    normalized = " ".join(parts)
    return CronSpec(spec, tz, normalized, zone(None if tz is None else check_tz(tz)))


def _bad_field(spec: str, name: str, text: str, values: str) -> str:
    return (
        f"schedule spec {spec!r}: bad {name} field {text!r} (values {values}; "
        "each item '*', 'n', 'a-b', '*/s' or 'a-b/s', items joined by commas)"
    )


def _cronsim_message(spec: str, parts: list[str], why: str) -> str:
    """Our words for cronsim's ``Bad <field>``, naming the field's text."""
    for text, (name, values) in zip(parts, _FIELDS, strict=True):
        if why == f"Bad {name}":
            if name == "day-of-month" and _FIELD.fullmatch(text):
                return (
                    f"schedule spec {spec!r}: day-of-month {text!r} is out of range or "
                    f"never occurs in the months {parts[3]!r} (values {values})"
                )
            return _bad_field(spec, name, text, values)
    return f"schedule spec {spec!r} is not a valid cron spec ({why})"
