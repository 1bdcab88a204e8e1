"""The ``alkstore`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from alkstore._discovery import engines
from alkstore._errors import Error

__all__ = ["main"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv``; return the exit code."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    if arguments.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        handler = _COMMANDS[arguments.command]
        return handler(arguments)
    except Error as exc:
        if arguments.debug:
            raise
        print(f"alkstore: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alkstore",
        description="Coordination primitives inside the database you already have.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_core_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    listing = commands.add_parser("engines", help="list the installed engines")
    listing.add_argument("--json", action="store_true", help="print JSON for scripts")
    return parser


def _engines(arguments: argparse.Namespace) -> int:
    installed = engines()
    if arguments.json:
        rows = [
            {
                "name": info.name,
                "schemes": list(info.schemes),
                "distribution": info.distribution,
                "version": info.version,
            }
            for info in installed.values()
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not installed:
        print("no engines installed; for the embedded default: pip install alkstore-sqlite")
        return EXIT_OK
    table = [("ENGINE", "SCHEMES", "DISTRIBUTION", "VERSION")]
    table += [
        (info.name, ", ".join(info.schemes), info.distribution, info.version)
        for info in installed.values()
    ]
    widths = [max(len(row[column]) for row in table) for column in range(4)]
    for row in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return EXIT_OK


_COMMANDS = {"engines": _engines}


def _core_version() -> str:
    try:
        return version("alkstore-core")
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
