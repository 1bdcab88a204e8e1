"""How the command prints: aligned tables for people, JSON for scripts, live progress."""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from alkstore._visible import json_escaped, visible

__all__ = [
    "DEFAULT_LOG_LEVEL",
    "LOG_LEVELS",
    "Progress",
    "RecentRate",
    "ago",
    "clip",
    "clip_text",
    "fields_of",
    "log_to_stderr",
    "print_json",
    "print_table",
    "when",
]

_CLIP = 60
_CELL = 100
"""The widest a table's cell gets: a 12,000-character name would pad every row."""


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], empty: str) -> None:
    """Print ``rows`` under ``headers`` in aligned columns, or ``empty`` when there are none."""
    if not rows:
        print(empty)
        return
    cells = [list(headers)] + [
        ["" if cell is None else _cell(cell) for cell in row] for row in rows
    ]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    for row in cells:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _cell(value: object) -> str:
    """A table cell: one line that shows what it holds (see ``visible``), clipped."""
    text = visible(str(value))
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON (non-ASCII kept readable but for characters
    that would not show as themselves, see ``json_escaped``; dataclasses as objects
    of their fields)."""
    print(json_escaped(json.dumps(value, indent=2, ensure_ascii=False, default=_fields_or_refuse)))


def fields_of(value: Any) -> dict[str, Any]:
    """A dataclass instance's fields as a dict, one level deep: ``dataclasses.asdict``
    copies payloads recursively, two frames a level, and fails on deep ones."""
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}


def _fields_or_refuse(value: object) -> dict[str, Any]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_of(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def clip(value: Any) -> str:
    """A payload as one short line of JSON."""
    return clip_text(json.dumps(value, ensure_ascii=False))


def clip_text(text: str) -> str:
    """``text`` as one short line: whitespace runs (line feeds too) made single spaces,
    and cut with ``…`` past the width payloads are cut at."""
    if not text.isprintable() or "  " in text:
        text = visible(" ".join(text.split()))
    return text if len(text) <= _CLIP else text[: _CLIP - 1] + "…"


def ago(seconds: float | None) -> str:
    """``12.3s``-style age, or ``-`` for none."""
    return "-" if seconds is None else _span(seconds)


def when(timestamp: float | None, now: float) -> str:
    """A Unix time relative to ``now``: ``in 4.0s``, ``2.5m ago`` or ``-``."""
    if timestamp is None:
        return "-"
    delta = timestamp - now
    return f"in {_span(delta)}" if delta >= 0 else f"{_span(-delta)} ago"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86_400.0), ("h", 3_600.0), ("m", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


class RecentRate:
    """Jobs per second over the last ``window_s`` seconds: a sliding window of counts.

    Each :meth:`update` notes the running total at the clock's time and returns
    the rate since the oldest reading still inside the window (all of them
    while the run is younger than the window), so a burst or a stall shows
    within ``window_s``, unlike an average since the start.
    """

    def __init__(self, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, not {window_s!r}")
        self.window_s = window_s
        self._clock = clock
        self._readings: collections.deque[tuple[float, int]] = collections.deque()

    def update(self, total: int) -> float:
        """Note ``total`` (handled so far) now; return the recent rate per second."""
        now = self._clock()
        readings = self._readings
        readings.append((now, total))
        # Keep the newest reading at or before the window's start, as its baseline.
        while len(readings) > 1 and readings[1][0] <= now - self.window_s:
            readings.popleft()
        since, then = readings[0]
        elapsed = now - since
        return (total - then) / elapsed if elapsed > 0 else 0.0

    def __repr__(self) -> str:
        return f"<RecentRate window_s={self.window_s} readings={len(self._readings)}>"


class Progress:
    """Rewrites one status line on a terminal every half second; silent otherwise.

    ``describe`` returns the line's text. Scripts (a pipe, a file) see nothing,
    so progress never mixes into output they parse.
    """

    def __init__(self, describe: Callable[[], str], stream: TextIO | None = None) -> None:
        self._describe = describe
        self._stream = sys.stderr if stream is None else stream
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self._stream.isatty():
            self._thread = threading.Thread(
                target=self._show, name="alkstore-progress", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self._write(self._describe() + "\n")

    def _show(self) -> None:
        while not self._done.wait(0.5):
            self._write(self._describe())

    def _write(self, text: str) -> None:
        self._stream.write(f"\r\x1b[2K{text}")
        self._stream.flush()


LOG_LEVELS = ("debug", "info", "warning", "error")
"""What ``--log-level`` takes."""
DEFAULT_LOG_LEVEL = "warning"


def log_to_stderr(debug: bool, level: str = DEFAULT_LOG_LEVEL) -> None:
    """Show the library's records from ``level`` up (by default its warnings: a
    worker's failed jobs, say) as one line each.

    With ``debug`` a record's traceback follows its line; without, only the
    exception's type and first line do.
    """
    threshold = logging.getLevelName(level.upper())
    logger = logging.getLogger("alkstore")
    for handler in [h for h in logger.handlers if isinstance(h, _StderrLines)]:
        logger.removeHandler(handler)
    logger.addHandler(_StderrLines(debug, threshold))
    if threshold < logger.getEffectiveLevel():  # below the root's WARNING: let them through
        logger.setLevel(threshold)


class _StderrLines(logging.Handler):
    """Writes each record to the current stderr as ``alkstore: message``."""

    def __init__(self, debug: bool, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self._debug = debug

    def emit(self, record: logging.LogRecord) -> None:
        """Print the record's line (and, with debug, its traceback)."""
        try:
            text = self._line(record)
        except Exception:
            self.handleError(record)
            return
        # On a terminal, first clear a progress line the record would run into.
        clear = "\r\x1b[2K" if sys.stderr.isatty() else ""
        print(clear + text, file=sys.stderr, flush=True)

    def _line(self, record: logging.LogRecord) -> str:
        # One line a record, whatever a handler's error said (escapes shown, not obeyed).
        line = f"alkstore: {visible(record.getMessage())}"
        if not record.exc_info or record.exc_info[1] is None:
            return line
        if self._debug:
            trace = logging.Formatter().formatException(record.exc_info).rstrip()
            return "\n".join([line, *(visible(part) for part in trace.splitlines())])
        error = record.exc_info[1]
        text = str(error).strip()
        if text and line.endswith(visible(f"{type(error).__name__}: {text}")):
            return line  # the message said it all already
        first = visible(" ".join((text.splitlines() or [""])[0].split()))
        said = type(error).__name__ + (f": {first}" if first else "")
        return line if line.endswith(said) else f"{line}: {said}"
