"""Riding out a database outage: one warning per outage, jittered backoff, one
info when it is over. Every long-running runner reports its calls to one.

An error no pause can cure (``Database.permanent``) is not an outage: it ends
the runner, which raises it."""

from __future__ import annotations

import logging
import random
import threading
import time

from alkstore._backoff import backoff_ceiling
from alkstore._errors import Database

__all__ = ["OUTAGE_MAX_PAUSE_S", "Outage", "is_permanent"]

OUTAGE_MAX_PAUSE_S = 3.0
"""The longest a runner waits between two tries while the database fails."""

_OUTAGE_FIRST_PAUSE_S = 0.1
_STEADY_S = 5.0
"""How long the database must answer before an outage counts as over: a
failure sooner (a stale pooled connection, a flapping server) is the same outage."""


class Outage:
    """One runner's account of failing database calls: one warning per outage, capped backoff.

    The runner reports every database call: :meth:`failed` (it returns how
    long to pause before trying again) or :meth:`succeeded`. The first failure
    after a healthy spell logs ONE warning naming the runner, what failed and
    the error's message (alkstore errors never carry a password); later
    failures of the same outage log at debug only. Pauses grow from 0.1 s and
    are capped at :data:`OUTAGE_MAX_PAUSE_S`, with jitter so that many runners
    do not retry in step. Once the database has answered for
    :data:`_STEADY_S` without a failure, the outage is over and an info record
    says how long it lasted. A permanent error (``Database.permanent``) is
    no outage: it is logged once, as an error, and :meth:`failed` raises it,
    which ends the runner. Safe to use from several threads.
    """

    def __init__(self, log: logging.Logger, runner: str) -> None:
        self._log = log
        self._runner = runner
        self._lock = threading.Lock()
        self._failures = 0
        self._since: float | None = None
        """When the current outage's first failure happened (monotonic)."""
        self._answered_at: float | None = None
        """When the database first answered again during the current outage."""
        self._ended = False
        """Whether a permanent error ended the runner (logged once)."""

    def failed(self, action: str, error: BaseException) -> float:
        """Note that ``action`` failed with ``error``; return the pause before the next try.

        Raises:
            Database: ``error`` itself, when it is permanent: logged once, as
                the end of the runner rather than an outage.
        """
        if is_permanent(error):
            self.ended_by(action, error)
            raise error
        now = time.monotonic()
        with self._lock:
            self._end_if_steady(now)
            starts = self._since is None
            if starts:
                self._since = now
            self._answered_at = None
            self._failures += 1
            failures = self._failures
        if starts:
            self._log.warning(
                "%s: %s failed; retrying, with pauses of up to %.0f s, until the database "
                "answers: %s",
                self._runner, action, OUTAGE_MAX_PAUSE_S, _first_line(error),
            )  # fmt: skip
        else:
            self._log.debug("%s: %s failed again: %s", self._runner, action, _first_line(error))
        return _pause(failures)

    def ended_by(self, action: str, error: BaseException) -> None:
        """Log that ``action`` failed with a permanent ``error``, which ends the
        runner: once, however many of its calls then meet the error."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._log.error(
            "%s: %s failed, and trying again cannot help; stopping: %s",
            self._runner, action, _first_line(error),
        )  # fmt: skip

    def succeeded(self) -> None:
        """Note that a database call succeeded."""
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                return
            if self._answered_at is None:
                self._answered_at = now
            self._end_if_steady(now)

    def _end_if_steady(self, now: float) -> None:
        # Called with the lock held.
        if self._since is None or self._answered_at is None:
            return
        if now - self._answered_at < _STEADY_S:
            return
        lasted = self._answered_at - self._since
        self._since = self._answered_at = None
        self._failures = 0
        self._log.info("%s: recovered after %.1f s of database failures", self._runner, lasted)


def is_permanent(error: BaseException) -> bool:
    """Whether ``error`` is one no retry can cure (``Database.permanent``)."""
    return isinstance(error, Database) and error.permanent


def _pause(failures: int) -> float:
    """Equal jitter: uniform in [ceiling/2, ceiling], the ceiling doubling up to the cap."""
    ceiling = min(backoff_ceiling(_OUTAGE_FIRST_PAUSE_S, failures), OUTAGE_MAX_PAUSE_S)
    return ceiling / 2 + random.random() * ceiling / 2


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    described = " ".join(text[0].split()) if text else ""
    return f"{type(error).__name__}: {described}" if described else type(error).__name__
