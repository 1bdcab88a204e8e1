"""The ``alkstore`` command: inspect a store, write to it, and run its workers."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from alkstore._cli import _acting, _inspecting, _long_running, _metrics, _operating, _web
from alkstore._cli._common import (
    DEFAULT_DSN,
    EXIT_ERROR,
    EXIT_NOTHING,
    EXIT_USAGE,
    CommandError,
    UsageError,
)
from alkstore._cli._output import DEFAULT_LOG_LEVEL, LOG_LEVELS, log_to_stderr
from alkstore._errors import Error
from alkstore._visible import visible

__all__ = ["main"]

EXIT_INTERRUPTED = 130
"""Ctrl-C ended the command: the shells' code for death by SIGINT (128 + 2)."""

_EPILOG = f"""\
The store is --dsn, else $ALKSTORE_DSN, else {DEFAULT_DSN} (SQLite).
Exit codes: 0 done; {EXIT_ERROR} error (one line on stderr; --debug for the
traceback); {EXIT_USAGE} bad usage or input; {EXIT_NOTHING} nothing there
(unschedule or cancel of an unknown name or id, requeue-dead or purge-dead
that found nothing to move, listen or tail --timeout that saw nothing).
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv``; return the exit code."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    log_to_stderr(arguments.debug, arguments.log_level)
    if arguments.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        code: int = arguments.run(arguments)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away (`alkstore jobs q | head`): stop quietly.
        _discard_stdout()
        return EXIT_ERROR
    except KeyboardInterrupt:
        # Ctrl-C where no command waits for it (a connect, a lock wait): no traceback.
        if arguments.debug:
            raise
        print(f"alkstore {arguments.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except UsageError as exc:
        if arguments.debug:
            raise
        print(f"alkstore {arguments.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (Error, CommandError, ValueError, TypeError, OSError, RecursionError) as exc:
        if arguments.debug:
            raise
        print(f"alkstore {arguments.command}: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, (ValueError, TypeError)) else EXIT_ERROR
    return code


def _one_line(exc: BaseException) -> str:
    """The error's first line, its whitespace runs (tabs included) made single spaces."""
    text = str(exc).strip().splitlines()
    return visible(" ".join(text[0].split())) if text else type(exc).__name__


def _discard_stdout() -> None:
    """Point stdout at the null device, so that exiting does not flush into a closed pipe."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, like every other error."""

    def error(self, message: str) -> NoReturn:
        """Print ``alkstore COMMAND: message`` and a pointer to --help; exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    # The common options work before or after the command: `alkstore --json
    # queues` and `alkstore queues --json` alike. The subcommands' copies
    # default to SUPPRESS so that they never overwrite what was given before
    # the command; they must be separate Action objects from the top-level
    # ones, whose defaults are real values.
    common = argparse.ArgumentParser(add_help=False)
    _add_common_options(
        common, dsn=argparse.SUPPRESS, flag=argparse.SUPPRESS, level=argparse.SUPPRESS
    )
    parser = _Parser(
        prog="alkstore",
        description="Coordination primitives inside the database you already have.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_common_options(parser, dsn=None, flag=False, level=DEFAULT_LOG_LEVEL)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_core_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (_inspecting, _acting, _operating, _long_running, _metrics, _web):
        module.register(commands, common)
    return parser


def _add_common_options(
    parser: argparse.ArgumentParser, *, dsn: object, flag: object, level: object
) -> None:
    """Add --dsn, --json, --debug and --log-level to ``parser`` with these defaults."""
    parser.add_argument("--dsn", default=dsn, help="the store to open")
    parser.add_argument("--json", action="store_true", default=flag, help="print JSON for scripts")
    parser.add_argument("--debug", action="store_true", default=flag, help="show tracebacks")
    parser.add_argument(
        "--log-level", default=level, choices=LOG_LEVELS, type=str.lower, metavar="LEVEL",
        help="the library's records shown on stderr, from this level up: "
        f"{', '.join(LOG_LEVELS)} (default {DEFAULT_LOG_LEVEL}; info adds recoveries, "
        "debug every job a worker starts and settles)",
    )  # fmt: skip


def _core_version() -> str:
    try:
        return version("alkstore-core")
    except PackageNotFoundError:
        return "unknown"
