"""``manage.py run_worker``: a worker on the ``confirmations`` queue; each job confirms its order.

By default it runs until SIGTERM or SIGINT (a second one cuts the grace
period short). ``--until-idle`` stops once no job is ready or being handled,
``--max-jobs N`` after N jobs: what tests and one-off runs use.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import alkstore

from ...jobs import confirm_order
from ...store import CONFIRMATION_QUEUE, CONFIRMATIONS, close_stores, get_store

IDLE_CHECK_S = 0.1


class Command(BaseCommand):
    help = "Run a worker on the confirmations queue: each job confirms its order."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=1, help="jobs handled at once")
        parser.add_argument(
            "--until-idle",
            action="store_true",
            help="stop once no job is ready or running (jobs waiting to be retried stay queued)",
        )
        parser.add_argument("--max-jobs", type=int, help="stop after this many jobs")

    def handle(self, *args: Any, **options: Any) -> None:
        max_jobs: int | None = options["max_jobs"]
        if max_jobs is not None and max_jobs < 1:
            raise CommandError("--max-jobs must be at least 1")
        store = get_store()
        stop = threading.Event()
        handled = 0
        counting = threading.Lock()

        def handler(job: alkstore.Job) -> None:
            nonlocal handled
            try:
                confirm_order(job)
            finally:
                with counting:
                    handled += 1
                    if max_jobs is not None and handled >= max_jobs:
                        stop.set()  # before this job settles, so no next one starts

        worker = alkstore.Worker(
            store,
            store.queue(CONFIRMATIONS, CONFIRMATION_QUEUE),
            handler,
            concurrency=options["concurrency"],
        )
        self.stdout.write(f"worker {worker.worker_id} on {store.location}, queue {CONFIRMATIONS}")
        try:
            with _stopped_by_signals(stop, worker):
                if options["until_idle"]:
                    watcher = threading.Thread(
                        target=_stop_when_idle, args=(store, worker, stop), daemon=True
                    )
                    watcher.start()
                worker.run(stop)
                stop.set()  # ends the idle watcher too
        finally:
            close_stores()
        stats = worker.stats()
        self.stdout.write(
            f"worker stopped: {stats.succeeded} confirmed, {stats.failed} failed, "
            f"{stats.released} released"
        )


def _stop_when_idle(store: alkstore.Store, worker: alkstore.Worker, stop: threading.Event) -> None:
    """Set ``stop`` once the queue has no job ready or claimed and the worker holds none.

    A claim moves a job from ready to processing in one transaction, and one
    reading of the counts sees both: there is no moment when a job in hand
    is counted in neither.
    """
    while not stop.wait(IDLE_CHECK_S):
        queues = {stats.name: stats for stats in store.inspect().queues()}
        stats = queues.get(CONFIRMATIONS)
        busy = stats is not None and stats.ready + stats.processing > 0
        if not busy and worker.stats().in_flight == 0:
            stop.set()


@contextlib.contextmanager
def _stopped_by_signals(stop: threading.Event, worker: alkstore.Worker) -> Iterator[None]:
    """SIGTERM or SIGINT stops the worker gracefully; a second one hurries it.

    Only the main thread may set signal handlers: elsewhere (``call_command``
    from a thread) this does nothing. The previous handlers come back after.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():
            worker.hurry()
        stop.set()

    previous = {
        signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
