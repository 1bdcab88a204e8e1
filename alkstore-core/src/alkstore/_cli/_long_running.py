"""Commands that run until stopped: worker, tail, listen, run-schedules.

Each stops cleanly on SIGTERM or SIGINT. On a terminal the worker shows live
progress on stderr; stdout carries only what scripts may parse. Each rides
out a database outage (one warning on stderr, then it carries on); the worker
exits 1 when a handler raises ``SystemExit`` or ``KeyboardInterrupt``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from alkstore._cli._common import (
    EXIT_ERROR,
    EXIT_NOTHING,
    EXIT_OK,
    UsageError,
    at_least_one,
    command,
    opened_store,
    queue_named,
    seconds,
)
from alkstore._cli._output import Progress, RecentRate, clip
from alkstore._errors import Database, LeadershipLost
from alkstore._names import check_identifier
from alkstore._outage import Outage
from alkstore._signals import stop_on_signals
from alkstore._store import StopSignal, default_owner
from alkstore._stream import EventReceiver, Stream, check_offset, follow
from alkstore._values import StreamEvent
from alkstore._visible import json_escaped, visible
from alkstore._worker import Worker

__all__ = ["register"]

log = logging.getLogger("alkstore.cli")

_STAND_BY_AGAIN_S = 1.0
"""The pause before a runner that lost scheduler leadership campaigns again."""


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the long-running commands to ``commands``."""
    worker = command(commands, common, "worker", "run a handler on a queue's jobs")(_worker)
    worker.add_argument("queue", help="the queue (an outbox's: __alkstore_outbox:NAME)")
    worker.add_argument("handler", help="module:function, called with each Job")
    worker.add_argument("--concurrency", type=int, default=1, help="jobs run at once")
    worker.add_argument("--batch-size", type=int, help="jobs claimed ahead (default: concurrency)")
    worker.add_argument("--grace", type=float, default=30.0, help="seconds to finish at shutdown")
    worker.add_argument("--worker-id", help="default: host:pid:random")

    tail = command(commands, common, "tail", "print a stream's events as they commit")(_tail)
    tail.add_argument("stream")
    start = tail.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_offset", type=int, help="start after this offset")
    start.add_argument("--consumer", help="start after this consumer's saved offset")
    _add_until_options(tail, "events")

    listen = command(commands, common, "listen", "print a channel's wakes as they come")(_listen)
    listen.add_argument("channel")
    _add_until_options(listen, "wakes")

    schedules = command(
        commands, common, "run-schedules", "fire due schedules (one leader among runners)"
    )(_run_schedules)
    schedules.add_argument("--owner", help="this runner's name (default: host:pid:random)")


def _add_until_options(parser: argparse.ArgumentParser, things: str) -> None:
    parser.add_argument("--count", type=at_least_one, help=f"stop after this many {things}")
    parser.add_argument("--timeout", type=seconds, help="stop after this many seconds")


def _worker(arguments: argparse.Namespace) -> int:
    handler = _import_handler(arguments.handler)
    handler_exit = False
    with opened_store(arguments, creates=True) as store:
        worker = Worker(
            store, queue_named(store, arguments.queue), handler,
            concurrency=arguments.concurrency, batch_size=arguments.batch_size,
            grace_s=arguments.grace, worker_id=arguments.worker_id,
        )  # fmt: skip
        with stop_on_signals(on_second=worker.hurry) as stop:
            _say(f"worker {worker.worker_id} on {arguments.queue!r} (Ctrl-C to stop)")
            try:
                rate = RecentRate()
                with Progress(lambda: _describe(worker, rate)):
                    worker.run(stop)
            except (SystemExit, KeyboardInterrupt):
                # Signals only set ``stop`` here, so these came from a handler; the
                # worker logged it and released its claims. Exit 1, whatever its code.
                handler_exit = True
    stats = worker.stats()
    if arguments.json:
        print_line({**dataclasses.asdict(stats), "handled": stats.handled})
    else:
        print(
            f"handled {stats.handled}: {stats.succeeded} succeeded, {stats.failed} failed, "
            f"{stats.released} released, {stats.lost} lost"
        )
    return EXIT_ERROR if handler_exit else EXIT_OK


def _describe(worker: Worker, rate: RecentRate) -> str:
    """The progress line: what was handled, the rate over the last 10 s, what is running."""
    stats = worker.stats()
    recent = rate.update(stats.handled)
    return (
        f"handled {stats.handled} ({stats.failed} failed) · {recent:.1f}/s "
        f"(last {rate.window_s:.0f} s) · in flight {stats.in_flight}"
    )


def _import_handler(spec: str) -> Callable[..., Any]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"handler must be module:function, not {spec!r}")
    # Like other job runners: modules in the working directory are importable.
    sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot import {spec!r}: {type(exc).__name__}: {exc}") from None
    if not callable(found):
        raise UsageError(f"{spec!r} is not callable")
    return found  # type: ignore[no-any-return]


def _tail(arguments: argparse.Namespace) -> int:
    seen = 0
    with opened_store(arguments) as store, stop_on_signals() as stop:
        stream = store.stream(arguments.stream)
        if arguments.from_offset is not None:
            start = check_offset(arguments.from_offset)
        elif arguments.consumer is not None:
            start = stream.get_offset(arguments.consumer)
        else:
            start = next((s.head for s in store.inspect().streams() if s.name == stream.name), 0)
        _say(f"tailing {stream.name!r} after offset {start} (Ctrl-C to stop)")
        events = _TailReceiver(stream, start, stop)
        try:
            for _ in _until(arguments, stop.is_set):
                event = events.recv(0.25)
                if event is None:
                    continue
                _print_event(event, arguments.json)
                seen += 1
                if arguments.count is not None and seen >= arguments.count:
                    break
        finally:
            events.close()
    return EXIT_OK if seen or arguments.timeout is None else EXIT_NOTHING


class _TailReceiver:
    """A stream's events after ``start``, through outages and watcher deaths.

    A failed read is retried after a pause (one warning per outage); the
    receiver's position moves only on a successful read, so nothing is skipped
    or printed twice. A receiver that closes (its watcher died) is replaced,
    starting after the last event printed.
    """

    def __init__(self, stream: Stream, start: int, stop: StopSignal) -> None:
        self._stream = stream
        self._stop = stop
        self._after = start
        self._outage = Outage(log, f"tail of {stream.name!r}")
        self._receiver: EventReceiver | None = None

    def recv(self, timeout: float) -> StreamEvent | None:
        """The next event, or None after ``timeout`` or a pause for an outage."""
        try:
            if self._receiver is None or self._receiver.closed:
                self.close()
                self._receiver = follow(self._stream, self._after, "(tail)")
            event = self._receiver.recv(timeout)
        except Database as exc:
            self._stop.wait(self._outage.failed(f"reading {self._stream.name!r}", exc))
            return None
        self._outage.succeeded()
        if event is not None:
            self._after = event.offset
        return event

    def close(self) -> None:
        if self._receiver is not None:
            self._receiver.close()


def _print_event(event: StreamEvent, as_json: bool) -> None:
    if as_json:
        print_line({
            "offset": event.offset, "key": event.key,
            "payload": event.payload, "created_at": event.created_at,
        })  # fmt: skip
    else:
        key = "" if event.key is None else f" [{visible(event.key)}]"
        print(f"{event.offset}{key} {clip(event.payload)}", flush=True)


def _listen(arguments: argparse.Namespace) -> int:
    seen = 0
    with (
        opened_store(arguments) as store,
        stop_on_signals() as stop,
        store.listen(arguments.channel) as wakes,
    ):
        _say(f"listening on {arguments.channel!r} (Ctrl-C to stop)")
        for _ in _until(arguments, stop.is_set):
            wake = wakes.recv(0.25)
            if wake is None:
                if wakes.closed:
                    break
                continue
            if arguments.json:
                print_line({"channel": wake.channel, "at": time.time()})
            else:
                print(f"wake {visible(wake.channel)}", flush=True)
            seen += 1
            if arguments.count is not None and seen >= arguments.count:
                break
    return EXIT_OK if seen or arguments.timeout is None else EXIT_NOTHING


def _until(arguments: argparse.Namespace, stopped: Callable[[], bool]) -> Iterator[None]:
    """Yield until a signal arrives or ``--timeout`` passes."""
    deadline = None if arguments.timeout is None else time.monotonic() + arguments.timeout
    while not stopped() and (deadline is None or time.monotonic() < deadline):
        yield


def _run_schedules(arguments: argparse.Namespace) -> int:
    # One owner for the whole run, so that leadership re-taken is this runner's.
    given = arguments.owner
    owner = default_owner() if given is None else check_identifier(given, "owner")
    with opened_store(arguments) as store, stop_on_signals() as stop:
        _say("running schedules (Ctrl-C to stop)")
        while not stop.is_set():
            try:
                store.run_schedules(stop, owner=owner)
            except LeadershipLost as exc:
                # A daemon that died of a lost lease would leave schedules unfired.
                log.warning("%s; standing by to lead again", exc)
                stop.wait(_STAND_BY_AGAIN_S)
    return EXIT_OK


def print_line(value: Any) -> None:
    """Print one compact JSON line (JSON Lines: one record per line, flushed; see
    ``json_escaped``)."""
    print(json_escaped(json.dumps(value, ensure_ascii=False)), flush=True)


def _say(message: str) -> None:
    print(f"alkstore: {message}", file=sys.stderr, flush=True)
