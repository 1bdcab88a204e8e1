"""Commands that write: enqueue, publish, notify, schedule, unschedule, sweep."""

from __future__ import annotations

import argparse
import time
from typing import Any

from alkstore._cli._common import (
    EXIT_NOTHING,
    EXIT_OK,
    command,
    json_value,
    opened_store,
    queue_named,
    timestamp,
)
from alkstore._cli._output import fields_of, print_json, print_table, when
from alkstore._options import EnqueueOpts, ScheduleOpts
from alkstore._visible import visible

__all__ = ["register"]


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the writing commands to ``commands``."""
    enqueue = command(commands, common, "enqueue", "add a job to a queue")(_enqueue)
    enqueue.add_argument("queue")
    enqueue.add_argument("payload", type=json_value, help="the job's payload, as JSON")
    ready = enqueue.add_mutually_exclusive_group()
    ready.add_argument("--delay", type=float, help="seconds until the job is ready")
    ready.add_argument(
        "--run-at", type=timestamp, help="when it is ready: Unix seconds or ISO 8601"
    )
    enqueue.add_argument(
        "--key", help="a unique key: no second live job with it (prints the live job's id)"
    )
    _add_job_options(enqueue)

    publish = command(commands, common, "publish", "append an event to a stream")(_publish)
    publish.add_argument("stream")
    publish.add_argument("payload", type=json_value, help="the event's payload, as JSON")
    publish.add_argument("--key", help="the event's key")

    notify = command(commands, common, "notify", "wake a channel's listeners")(_notify)
    notify.add_argument("channel")
    notify.add_argument("payload", type=json_value, nargs="?", default=None, help="JSON")

    schedule = command(commands, common, "schedule", "create or replace a schedule")(_schedule)
    schedule.add_argument("name")
    schedule.add_argument(
        "spec",
        help="@every <n><s|m|h|d> ('@every 5m'), five cron fields ('0 3 * * *') or "
        "@hourly, @daily, @weekly, @monthly",
    )
    schedule.add_argument("queue", help="the queue each fire enqueues into")
    schedule.add_argument("payload", type=json_value, help="each job's payload, as JSON")
    schedule.add_argument(
        "--tz", help="the IANA time zone of a cron spec, e.g. Europe/Berlin (default: UTC)"
    )
    schedule.add_argument(
        "--key", help="a unique key for each fire's job: no fire while the last one's is live"
    )
    _add_job_options(schedule)

    unschedule = command(commands, common, "unschedule", "delete a schedule")(_unschedule)
    unschedule.add_argument("name")

    sweep = command(commands, common, "sweep", "dead-letter expired jobs, purge old dead letters")(
        _sweep
    )
    sweep.add_argument("queue", nargs="?", help="one queue (default: every queue)")


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--priority", type=int, default=0, help="higher is claimed first")
    parser.add_argument("--max-attempts", type=int, help="override the queue's")
    parser.add_argument("--expires", type=float, help="seconds after which it is never run")


def _enqueue(arguments: argparse.Namespace) -> int:
    opts = EnqueueOpts(
        delay=arguments.delay, run_at=arguments.run_at, priority=arguments.priority,
        max_attempts=arguments.max_attempts, expires=arguments.expires, key=arguments.key,
    )  # fmt: skip
    with opened_store(arguments, creates=True) as store:
        job_id = store.queue(arguments.queue).enqueue(arguments.payload, opts)
    print_json({"id": job_id}) if arguments.json else print(job_id)
    return EXIT_OK


def _publish(arguments: argparse.Namespace) -> int:
    with opened_store(arguments, creates=True) as store:
        stream = store.stream(arguments.stream)
        if arguments.key is None:
            offset = stream.publish(arguments.payload)
        else:
            offset = stream.publish_with_key(arguments.key, arguments.payload)
    print_json({"offset": offset}) if arguments.json else print(offset)
    return EXIT_OK


def _notify(arguments: argparse.Namespace) -> int:
    with opened_store(arguments, creates=True) as store:
        store.notify(arguments.channel, arguments.payload)
    return EXIT_OK


def _schedule(arguments: argparse.Namespace) -> int:
    opts = ScheduleOpts(
        priority=arguments.priority,
        max_attempts=arguments.max_attempts,
        expires=arguments.expires,
        tz=arguments.tz,
        key=arguments.key,
    )
    with opened_store(arguments, creates=True) as store:
        made = store.schedule(
            arguments.name, arguments.spec, arguments.queue, arguments.payload, opts
        )
    if arguments.json:
        print_json(fields_of(made))
    else:
        upcoming = when(made.next_fire_at, time.time())
        zone = f" ({made.tz})" if made.tz is not None else ""
        print(f"{visible(made.name)}: {made.spec}{zone} into {made.queue!r}, next {upcoming}")
    return EXIT_OK


def _unschedule(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        removed = store.unschedule(arguments.name)
    if arguments.json:
        print_json({"removed": removed})
    elif not removed:
        print(f"no schedule named {arguments.name!r}")
    return EXIT_OK if removed else EXIT_NOTHING


def _sweep(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        if arguments.queue is None:
            names = [stats.name for stats in store.inspect().queues()]
        else:
            names = [arguments.queue]
        moved = {name: queue_named(store, name).sweep_expired() for name in names}
    if arguments.json:
        print_json(moved)
    else:
        print_table(("QUEUE", "EXPIRED → DEAD"), sorted(moved.items()), empty="no queues to sweep")
    return EXIT_OK
