"""Commands that look: engines, queues, jobs, streams, locks, schedules."""

from __future__ import annotations

import argparse
import time
from typing import Any

from alkstore._cli._common import EXIT_OK, command, opened_store
from alkstore._cli._output import ago, clip, clip_text, fields_of, print_json, print_table, when
from alkstore._discovery import engines
from alkstore._inspect import JOB_STATES, MAX_JOBS_LISTED
from alkstore._values import JobInfo, Schedule

__all__ = ["register"]


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the looking commands to ``commands``."""
    command(commands, common, "engines", "list the installed engines")(_engines)
    command(commands, common, "queues", "count each queue's jobs by state")(_queues)
    jobs = command(commands, common, "jobs", "list a queue's jobs, dead letters with errors")(_jobs)
    jobs.add_argument("queue", help="the queue (an outbox's: __alkstore_outbox:NAME)")
    jobs.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    jobs.add_argument(
        "--limit",
        type=int,
        default=100,
        help=f"at most this many (default 100, max {MAX_JOBS_LISTED})",
    )
    command(commands, common, "streams", "list streams, each consumer's offset and lag")(_streams)
    command(commands, common, "locks", "list the locks held now")(_locks)
    command(commands, common, "schedules", "list schedules and their next fire times")(_schedules)


def _engines(arguments: argparse.Namespace) -> int:
    installed = engines()
    if arguments.json:
        print_json([
            {"name": info.name, "schemes": list(info.schemes),
             "distribution": info.distribution, "version": info.version,
             "contract_version": info.contract_version}
            for info in installed.values()
        ])  # fmt: skip
        return EXIT_OK
    print_table(
        ("ENGINE", "SCHEMES", "DISTRIBUTION", "VERSION", "CONTRACT"),
        [
            (
                info.name,
                ", ".join(info.schemes),
                info.distribution,
                info.version,
                info.contract_version,
            )
            for info in installed.values()
        ],
        empty="no engines installed; for the embedded default: pip install alkstore-sqlite",
    )
    return EXIT_OK


def _queues(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        queues = store.inspect().queues()
    if arguments.json:
        print_json([{**fields_of(stats), "total": stats.total} for stats in queues])
        return EXIT_OK
    print_table(
        ("QUEUE", "READY", "SCHEDULED", "PROCESSING", "DEAD", "EXPIRED", "OLDEST READY"),
        [
            (
                q.name,
                q.ready,
                q.scheduled,
                q.processing,
                q.dead,
                q.expired,
                ago(q.oldest_ready_age_s),
            )
            for q in queues
        ],
        empty="no queues hold jobs",
    )
    return EXIT_OK


def _jobs(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        jobs = store.inspect().jobs(arguments.queue, arguments.state, limit=arguments.limit)
    if arguments.json:
        print_json([fields_of(job) for job in jobs])
        return EXIT_OK
    now = time.time()
    print_table(
        ("ID", "STATE", "ATTEMPTS", "PRIORITY", "RUN AT", "WORKER", "ERROR", "PAYLOAD"),
        [_job_row(job, now) for job in jobs],
        empty=f"no {arguments.state or ''} jobs in {arguments.queue!r}".replace("  ", " "),
    )
    return EXIT_OK


def _job_row(job: JobInfo, now: float) -> tuple[object, ...]:
    error = clip_text(job.last_error or "-")  # clipped like payloads; --json has it whole
    return (
        job.id, job.state, f"{job.attempts}/{job.max_attempts}", job.priority,
        when(job.run_at, now), job.worker_id or "-", error, clip(job.payload),
    )  # fmt: skip


def _streams(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        streams = store.inspect().streams()
    if arguments.json:
        print_json([fields_of(stats) for stats in streams])
        return EXIT_OK
    rows: list[tuple[object, ...]] = []
    for stream in streams:
        rows.append((stream.name, stream.head, "-", "-", "-"))
        rows.extend(("", "", c.name, c.offset, c.lag) for c in stream.consumers)
    print_table(("STREAM", "HEAD", "CONSUMER", "OFFSET", "LAG"), rows, empty="no streams")
    return EXIT_OK


def _locks(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        locks = store.inspect().locks()
    if arguments.json:
        print_json([fields_of(lock) for lock in locks])
        return EXIT_OK
    now = time.time()
    print_table(
        ("LOCK", "OWNER", "EXPIRES"),
        [(lock.name, lock.owner, when(lock.expires_at, now)) for lock in locks],
        empty="no locks held",
    )
    return EXIT_OK


def _schedules(arguments: argparse.Namespace) -> int:
    with opened_store(arguments) as store:
        schedules = store.inspect().schedules()
    if arguments.json:
        print_json([fields_of(schedule) for schedule in schedules])
        return EXIT_OK
    now = time.time()
    print_table(
        ("SCHEDULE", "SPEC", "TZ", "QUEUE", "NEXT FIRE", "LAST FIRE", "PAYLOAD"),
        [(s.name, s.spec, _zone_of(s), s.queue, when(s.next_fire_at, now),
          "-" if s.last_fire_at is None else when(s.last_fire_at, now), clip(s.payload))
         for s in schedules],
        empty="no schedules",
    )  # fmt: skip
    return EXIT_OK


def _zone_of(schedule: Schedule) -> str:
    """The zone a schedule's spec is read in: its tz, UTC for a cron spec without
    one, '-' for an interval (no zone applies)."""
    if schedule.tz is not None:
        return schedule.tz
    return "-" if schedule.spec.startswith("@every") else "UTC"
