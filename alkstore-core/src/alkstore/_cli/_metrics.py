"""``alkstore metrics``: the store's Prometheus metrics, printed once or served over HTTP.

``--serve [HOST]:PORT`` serves ``/metrics`` from a threaded ``http.server``;
every scrape reads the store afresh. A scrape that cannot read the store
(the database down, locked, unreachable) answers 503 with one line saying
why, and the server keeps serving: the next scrape tries again.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import logging
import os
import socket
import sys
import threading
from typing import Any, NamedTuple

from alkstore._call_deadline import deadline_in
from alkstore._cli._common import (
    DEFAULT_DSN,
    EXIT_OK,
    CommandError,
    UsageError,
    command,
    opened_store,
    refuse_a_missing_file,
)
from alkstore._cli._output import print_json
from alkstore._discovery import open as open_target
from alkstore._discovery import redact
from alkstore._errors import Closed, Database, Error
from alkstore._metrics import CONTENT_TYPE, read_metrics
from alkstore._signals import stop_on_signals
from alkstore._store import Store

__all__ = ["ListenAddress", "MetricsSource", "listen_address", "register"]

log = logging.getLogger("alkstore.cli")

SCRAPE_OUTAGE_WAIT_S = 2.0
"""How long a scrape waits for a connection the engine cannot make (an outage)
before it answers 503, rather than the engine's whole connect timeout: well
inside a scraper's own timeout (Prometheus: 10 s)."""


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``metrics`` command to ``commands``."""
    metrics = command(
        commands, common, "metrics", "print the store's Prometheus metrics, or serve them"
    )(_metrics)
    metrics.add_argument(
        "--serve",
        type=listen_address,
        metavar="[HOST]:PORT",
        help="serve them at http://HOST:PORT/metrics (':9464': every interface) until stopped",
    )
    metrics.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar="NAME",
        help="always export this queue, with zeros while it holds no job (repeatable)",
    )


class ListenAddress(NamedTuple):
    """Where ``--serve`` listens: a host ("" for every interface) and a port (0: any free one)."""

    host: str
    port: int


def listen_address(text: str) -> ListenAddress:
    """argparse type: ``HOST:PORT``, ``:PORT`` (every interface) or ``[IPv6]:PORT``."""
    host, colon, port_text = text.rpartition(":")
    if not colon:
        raise argparse.ArgumentTypeError(f"give HOST:PORT or :PORT, not {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"write an IPv6 address in brackets, [::1]:PORT: {text!r}")
    if not (port_text.isascii() and port_text.isdigit()) or not 0 <= int(port_text) <= 65535:
        raise argparse.ArgumentTypeError(f"the port must be a number from 0 to 65535: {text!r}")
    if any(character.isspace() or character in "/@" for character in host):
        raise argparse.ArgumentTypeError(f"not a host name or address: {host!r}")
    return ListenAddress(host, int(port_text))


def _metrics(arguments: argparse.Namespace) -> int:
    if arguments.serve is not None:
        if arguments.json:
            raise UsageError("--json prints the metrics once; it does not go with --serve")
        return _serve(arguments, arguments.serve)
    with opened_store(arguments) as store:
        metrics = read_metrics(store, queues=arguments.queue)
    if arguments.json:
        print_json(metrics.as_json())
    else:
        sys.stdout.write(metrics.text())
    return EXIT_OK


class MetricsSource:
    """The store a metrics server reads, opened on the first scrape that can.

    A store that cannot be opened or read makes that scrape fail (503);
    the next one tries again. The first failure of a spell logs a warning,
    the first success after it an info record.
    """

    def __init__(self, dsn: str, queues: list[str]) -> None:
        self.dsn = dsn
        self._queues = queues
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._failing = False

    def read(self) -> str:
        """The metrics text now.

        Raises:
            alkstore.Error: the store could not be opened or read (the message
                never shows a password).
        """
        try:
            with deadline_in(SCRAPE_OUTAGE_WAIT_S):
                text = read_metrics(self._opened(), queues=self._queues).text()
        except Error as exc:
            if not self._failing:
                self._failing = True
                log.warning("metrics: cannot read the store: %s", one_line(exc))
            raise
        if self._failing:
            self._failing = False
            log.info("metrics: the store answers again")
        return text

    def _opened(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = open_target(self.dsn)
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def __repr__(self) -> str:
        state = "open" if self._store is not None else "not open"
        return f"<MetricsSource {redact(self.dsn)!r} {state}>"


def one_line(exc: BaseException) -> str:
    """The error's first line, its whitespace runs made single spaces."""
    lines = str(exc).strip().splitlines()
    return " ".join(lines[0].split()) if lines else type(exc).__name__


def _handler(source: MetricsSource) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        """``/metrics``: 200 with the text, 503 when the store cannot be read; 404 elsewhere."""

        server_version = "alkstore-metrics"

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _answer(self, *, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path != "/metrics":
                self._send(404, "text/plain; charset=utf-8", "not found: try /metrics\n", body)
                return
            try:
                text = source.read()
            except Closed:
                self._send(503, "text/plain; charset=utf-8", "the server is stopping\n", body)
                return
            except Error as exc:
                reason = f"cannot read the store: {one_line(exc)}\n"
                self._send(503, "text/plain; charset=utf-8", reason, body)
                return
            self._send(200, CONTENT_TYPE, text, body)

        def _send(self, status: int, content_type: str, text: str, body: bool) -> None:
            payload = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if body:
                self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics: %s %s", self.address_string(), format % args)

    return Handler


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: Any) -> None:
        """A scraper that went away mid-request is no error; anything else is one
        line on stderr, not the standard library's traceback per request."""
        error = sys.exc_info()[1]
        if error is None or isinstance(error, ConnectionError):  # reset, broken pipe, aborted
            return
        log.warning("metrics: a request from %s failed: %s", client_address[0], one_line(error))

    def __init__(self, address: ListenAddress, handler: type[http.server.BaseHTTPRequestHandler]):
        family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
        self.address_family = family
        super().__init__((address.host, address.port), handler)


def _serve(arguments: argparse.Namespace, address: ListenAddress) -> int:
    dsn = arguments.dsn or os.environ.get("ALKSTORE_DSN") or DEFAULT_DSN
    refuse_a_missing_file(dsn)
    source = MetricsSource(dsn, arguments.queue)
    # A DSN that cannot work fails now; an outage only warns, and scrapes
    # answer 503 until it ends.
    with contextlib.suppress(Database):
        source.read()
    try:
        server = _Server(address, _handler(source))
    except socket.gaierror as exc:
        raise UsageError(f"cannot listen on {address.host!r}: {exc.strerror}") from None
    except OSError as exc:
        shown = f"{address.host or '*'}:{address.port}"
        raise CommandError(f"cannot listen on {shown}: {exc.strerror or exc}") from None
    with stop_on_signals() as stop:
        host, port = str(server.server_address[0]), server.server_address[1]
        shown_host = f"[{host}]" if ":" in host else host
        print(
            f"alkstore: serving metrics of {redact(dsn)} on http://{shown_host}:{port}/metrics "
            "(Ctrl-C to stop)",
            file=sys.stderr,
            flush=True,
        )
        serving = threading.Thread(target=server.serve_forever, name="alkstore-metrics")
        serving.start()
        try:
            stop.wait()
        finally:
            server.shutdown()
            serving.join()
            server.server_close()
            source.close()
    return EXIT_OK
