"""An operator's commands: requeue-dead, purge-dead and cancel on jobs, trim on streams.

Whatever deletes or moves in bulk asks first when a person is at a terminal
(``--yes`` answers for them); from a script it just acts.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from alkstore._cli._common import (
    EXIT_NOTHING,
    EXIT_OK,
    CommandError,
    UsageError,
    command,
    opened_store,
    queue_named,
)
from alkstore._cli._output import print_json
from alkstore._store import Store

__all__ = ["register"]


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the operator's job commands to ``commands``."""
    requeue = command(
        commands, common, "requeue-dead", "move dead jobs back to ready, ids and payloads kept"
    )(_requeue_dead)
    requeue.add_argument("queue")
    requeue.add_argument("ids", nargs="*", type=_job_id, metavar="ID", help="dead jobs to requeue")
    requeue.add_argument("--all", action="store_true", help="requeue every dead job of the queue")
    requeue.add_argument(
        "--keep-attempts",
        action="store_true",
        help="keep each job's attempt count (one more claim) instead of starting again",
    )
    _add_yes(requeue)

    purge = command(commands, common, "purge-dead", "delete a queue's dead jobs")(_purge_dead)
    purge.add_argument("queue")
    purge.add_argument(
        "--older-than", type=float, metavar="SECONDS", help="only those dead this long"
    )
    _add_yes(purge)

    cancel = command(commands, common, "cancel", "delete one job, whatever its state")(_cancel)
    cancel.add_argument("queue")
    cancel.add_argument("id", type=_job_id)

    trim = command(commands, common, "trim", "delete a stream's old events")(_trim)
    trim.add_argument("stream")
    trim.add_argument(
        "--up-to", type=_offset, metavar="OFFSET", help="every event up to this offset"
    )
    trim.add_argument("--max-age", type=float, metavar="SECONDS", help="events older than this")
    trim.add_argument("--keep-last", type=_offset, metavar="N", help="all but the newest N events")
    trim.add_argument(
        "--force",
        action="store_true",
        help="with --max-age/--keep-last: also events a consumer has not read",
    )
    _add_yes(trim)


def _add_yes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask at a terminal")


def _job_id(text: str) -> int:
    """argparse type: a job id."""
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a job id (a positive whole number): {text!r}")
    return int(text)


def _offset(text: str) -> int:
    """argparse type: an offset or a count (a whole number, zero or more)."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(text)


def _requeue_dead(arguments: argparse.Namespace) -> int:
    if arguments.all == bool(arguments.ids):
        raise UsageError("give the ids of the dead jobs to requeue, or --all (not both)")
    with opened_store(arguments) as store:
        queue = queue_named(store, arguments.queue)
        if arguments.all:
            _confirm(arguments, f"Requeue all {_dead_count(store, queue.name)}")
        moved = queue.requeue_dead(
            None if arguments.all else arguments.ids, reset_attempts=not arguments.keep_attempts
        )
    if arguments.json:
        print_json({"requeued": moved})
    else:
        asked = "" if arguments.all else f" of {len(set(arguments.ids))}"
        print(f"requeued {moved}{asked} dead job{'s' if moved != 1 else ''} of {queue.name!r}")
    return EXIT_OK if moved else EXIT_NOTHING


def _purge_dead(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        queue = queue_named(store, arguments.queue)
        which = "" if arguments.older_than is None else f" dead for {arguments.older_than:g} s"
        _confirm(arguments, f"Delete the {_dead_count(store, queue.name)}{which}")
        purged = queue.purge_dead(arguments.older_than)
    if arguments.json:
        print_json({"purged": purged})
    else:
        print(f"deleted {purged} dead job{'s' if purged != 1 else ''} of {queue.name!r}")
    return EXIT_OK if purged else EXIT_NOTHING


def _cancel(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        cancelled = queue_named(store, arguments.queue).cancel(arguments.id)
    if arguments.json:
        print_json({"cancelled": cancelled})
    elif not cancelled:
        print(f"no job {arguments.id} in {arguments.queue!r}")
    return EXIT_OK if cancelled else EXIT_NOTHING


def _trim(arguments: argparse.Namespace) -> int:
    retains = arguments.max_age is not None or arguments.keep_last is not None
    if (arguments.up_to is not None) == retains:
        raise UsageError("give --up-to, or --max-age and/or --keep-last (not both)")
    if arguments.force and not retains:
        raise UsageError("--force goes with --max-age/--keep-last: --up-to spares no consumer")
    with opened_store(arguments) as store:
        stream = store.stream(arguments.stream)
        _confirm(arguments, f"Delete {_trim_scope(arguments)} of stream {stream.name!r}")
        if retains:
            trimmed = stream.retain(
                max_age_s=arguments.max_age, keep_last=arguments.keep_last, force=arguments.force
            )
        else:
            trimmed = stream.trim(arguments.up_to)
        through = stream.trimmed_through()
    if arguments.json:
        print_json({"trimmed": trimmed, "trimmed_through": through})
    else:
        print(
            f"trimmed {trimmed} event{'s' if trimmed != 1 else ''} of {stream.name!r}; "
            f"it is trimmed through offset {through}"
        )
    return EXIT_OK if trimmed else EXIT_NOTHING


def _trim_scope(arguments: argparse.Namespace) -> str:
    """Which events a trim command deletes, for its question."""
    if arguments.up_to is not None:
        return f"every event up to offset {arguments.up_to}"
    limits = []
    if arguments.max_age is not None:
        limits.append(f"older than {arguments.max_age:g} s")
    if arguments.keep_last is not None:
        limits.append(f"before the newest {arguments.keep_last}")
    spared = "" if arguments.force else " that every consumer has read"
    return f"the events {' or '.join(limits)}{spared}"


def _dead_count(store: Store, queue: str) -> str:
    """'N dead jobs of 'queue'', for a question."""
    dead = sum(stats.dead for stats in store.inspect().queues() if stats.name == queue)
    return f"{dead} dead job{'s' if dead != 1 else ''} of {queue!r}"


def _confirm(arguments: argparse.Namespace, question: str) -> None:
    """Ask ``question`` at a terminal (not with ``--yes``, nor from a script)."""
    if arguments.yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return
    print(f"{question}? [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise CommandError("not confirmed: nothing was changed")
