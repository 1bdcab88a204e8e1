"""What every command shares: exit codes, errors, opening the store, parsing input."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from alkstore._codec import JSONValue
from alkstore._discovery import engine_name_for
from alkstore._discovery import open as open_target
from alkstore._names import OUTBOX_QUEUE_PREFIX
from alkstore._outbox import backing_queue
from alkstore._queue import Queue
from alkstore._short_repr import short_repr
from alkstore._store import Store

__all__ = [
    "DEFAULT_DSN",
    "EXIT_ERROR",
    "EXIT_NOTHING",
    "EXIT_OK",
    "EXIT_USAGE",
    "CommandError",
    "UsageError",
    "command",
    "json_value",
    "opened_store",
    "queue_named",
    "refuse_a_missing_file",
    "timestamp",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOTHING = 0, 1, 2, 3

DEFAULT_DSN = "./alkstore.db"

_SQLITE_URL = re.compile(r"sqlite(?:\+[A-Za-z0-9_]+)?:///", re.IGNORECASE)


class CommandError(Exception):
    """A command could not do its job; the message is the one line printed."""


class UsageError(CommandError):
    """The command line asks for something impossible (exit code 2)."""


@contextlib.contextmanager
def opened_store(arguments: argparse.Namespace, *, creates: bool = False) -> Iterator[Store]:
    """Open the store the command line names; close it after the command.

    Only commands that write (``creates``) may bring the default SQLite file
    into being: looking at a store must not leave one behind.
    """
    dsn = arguments.dsn or os.environ.get("ALKSTORE_DSN") or DEFAULT_DSN
    if not creates:
        refuse_a_missing_file(dsn)
    with open_target(dsn) as store:
        yield store


def refuse_a_missing_file(dsn: str) -> None:
    """Refuse a SQLite target whose file does not exist, for a command that only
    looks: it would create an empty store there (a mistyped path) and report
    that nothing is in it."""
    path = sqlite_file_of(dsn)
    if path is None or path.exists():
        return
    if dsn == DEFAULT_DSN:
        raise CommandError(
            f"no store at {DEFAULT_DSN}; give --dsn, set ALKSTORE_DSN, or write something first"
        )
    raise CommandError(
        f"no store at {short_repr(dsn)}: the file does not exist (a mistyped path?); "
        "commands that write create it"
    )


def sqlite_file_of(dsn: str) -> Path | None:
    """The file a SQLite target names (a path, or ``sqlite:///relative`` and
    ``sqlite:////absolute``), None for any other engine's target."""
    if engine_name_for(dsn) != "sqlite":
        return None
    scheme = _SQLITE_URL.match(dsn)
    if scheme is None:
        return None if "://" in dsn else Path(dsn)
    return Path(dsn[scheme.end() :].split("?", 1)[0])


def queue_named(store: Store, name: str) -> Queue:
    """The queue ``name``, an outbox's backing queue (``__alkstore_outbox:…``) included."""
    if name.startswith(OUTBOX_QUEUE_PREFIX):
        return backing_queue(store.outbox(name[len(OUTBOX_QUEUE_PREFIX) :]))
    return store.queue(name)


def json_value(text: str) -> JSONValue:
    """argparse type: a JSON document."""
    try:
        value: JSONValue = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}): {text!r}") from None
    except RecursionError:
        raise argparse.ArgumentTypeError(
            f"nested more than 500 levels deep: {short_repr(text)}"
        ) from None
    return value


def at_least_one(text: str) -> int:
    """argparse type: a whole number of 1 or more (``--count``)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {number}")
    return number


def seconds(text: str) -> float:
    """argparse type: a finite number of seconds, 0 or more (``--timeout``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds, 0 or more, not {text!r}"
        )
    return value


def timestamp(text: str) -> float:
    """argparse type: Unix seconds, or an ISO 8601 time with its UTC offset."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not Unix seconds or an ISO 8601 time: {text!r}"
        ) from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the UTC offset, e.g. {text}+00:00")
    return moment.timestamp()


def command(
    commands: Any, common: argparse.ArgumentParser, name: str, help: str
) -> Callable[[Callable[[argparse.Namespace], int]], argparse.ArgumentParser]:
    """Add a subcommand; the decorated function runs it and returns the exit code."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=help, parents=[common]
    )

    def bind(run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        parser.set_defaults(run=run)
        return parser

    return bind
