"""Query and form parameters, checked: a bad one is a 400 page, never a traceback."""

from __future__ import annotations

from collections.abc import Mapping

from alkstore import JobState
from alkstore._inspect import JOB_STATES

__all__ = ["MAX_PAGE", "BadRequest", "job_id", "optional_id", "page_size", "queue_name", "state"]

MAX_PAGE = 500
"""The most jobs one listing page shows."""
_MAX_ID = 2**63 - 1


class BadRequest(Exception):
    """A parameter is missing or malformed; the message says which and why."""


def queue_name(params: Mapping[str, str]) -> str:
    """The ``queue`` parameter: a non-empty name, of any length the store takes."""
    name = params.get("queue", "")
    if not name:
        raise BadRequest("give a queue: ?queue=NAME")
    return name


def state(params: Mapping[str, str]) -> JobState | None:
    """The ``state`` parameter: one of the job states, or any when empty."""
    given = params.get("state", "")
    if not given:
        return None
    for known in JOB_STATES:
        if given == known:
            return known
    raise BadRequest(f"state must be one of {', '.join(JOB_STATES)}, not {given[:40]!r}")


def _integer(params: Mapping[str, str], name: str, minimum: int, maximum: int) -> int | None:
    given = params.get(name, "")
    if not given:
        return None
    if not given.isascii() or not given.isdigit() or len(given) > 19:
        raise BadRequest(f"{name} must be a whole number, not {given[:40]!r}")
    value = int(given)
    if not minimum <= value <= maximum:
        raise BadRequest(f"{name} must be from {minimum} to {maximum}, not {value}")
    return value


def optional_id(params: Mapping[str, str], name: str = "after") -> int | None:
    """A job id parameter that may be left out (``after``: the last id of the previous page)."""
    return _integer(params, name, 0, _MAX_ID)


def job_id(params: Mapping[str, str]) -> int:
    """The required ``id`` parameter: a positive job id."""
    value = _integer(params, "id", 1, _MAX_ID)
    if value is None:
        raise BadRequest("give a job id: ?id=N")
    return value


def page_size(params: Mapping[str, str], default: int = 50) -> int:
    """The ``limit`` parameter: 1 to ``MAX_PAGE`` jobs per page."""
    value = _integer(params, "limit", 1, MAX_PAGE)
    return default if value is None else value
