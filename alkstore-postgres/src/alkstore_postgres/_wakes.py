"""Wakes through LISTEN/NOTIFY on one dedicated connection per Store.

One thread owns the connection: it runs LISTEN for a channel's first
receiver and UNLISTEN after its last one closes (in the order they were
asked for), sleeps in ``select`` on the socket, and hands each notification
to the receivers of its channel. When the connection drops it logs one
warning, reconnects with backoff, listens again to every channel that still
has a receiver, logs when it is back, and sends every receiver
``Wake("__alkstore_listener_reconnected__")``: anything may have happened
while it was away, so everyone re-reads.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import selectors
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from alkstore import RECONNECT_CHANNEL, Closed, Database, Wake
from alkstore.engine import BufferedWakeReceiver, WakeFanout
from alkstore_postgres._errors import reason
from alkstore_postgres._names import DIGEST_TAG, channel_identifier, unstored, wake_payload

__all__ = [
    "BACKOFF_S",
    "LISTEN",
    "UNLISTEN",
    "Listener",
    "LongKeys",
    "notify_params",
    "notify_payload",
    "payload_key",
]

log = logging.getLogger("alkstore.postgres")

BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
_STATEMENTS_PER_ROUND_TRIP = 1000
_NOTIFY_TAG = "\\#"  # no stored key starts so: ``stored`` doubles every backslash
_notify_serial = itertools.count(1)
LISTEN = sql.SQL("LISTEN {}")
UNLISTEN = sql.SQL("UNLISTEN {}")


def notify_payload(key: str) -> str:
    """The payload of a user's notify on ``key``, unique within this process.

    PostgreSQL delivers equal (channel, payload) notifications of one
    transaction once; a serial number keeps each notify its own wake.
    """
    return f"{_NOTIFY_TAG}{next(_notify_serial)}:{wake_payload(key)}"


def notify_params(schema: str, channel: str) -> dict[str, str]:
    """Bind parameters for ``pg_notify`` of a user's ``notify(channel)`` in ``schema``.

    Each payload differs, so each notify is its own wake: PostgreSQL delivers
    equal notifications of one transaction only once.
    """
    return {"channel": channel_identifier(schema, channel), "key": notify_payload(channel)}


def payload_key(payload: str) -> str:
    """The key a notification's payload names, exactly: the inverse of
    :func:`notify_payload`, and of ``wake_payload`` for the engine's own wakes
    (a long key's digest comes back as it was sent: see :class:`LongKeys`)."""
    if payload.startswith(_NOTIFY_TAG):
        payload = payload.partition(":")[2]
    return payload if payload.startswith(DIGEST_TAG) else unstored(payload)


class LongKeys:
    """A listener's receivers' keys too long for a notification's payload, by
    the digest their notifications carry instead (``_names.wake_payload``).

    Held from a key's first receiver to its last (under the listener's lock);
    read by whoever hands notifications out.
    """

    def __init__(self) -> None:
        self._by_digest: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<LongKeys {len(self._by_digest)}>"

    def hold(self, key: str) -> None:
        payload = wake_payload(key)
        if payload.startswith(DIGEST_TAG):
            self._by_digest[payload] = key

    def drop(self, key: str) -> None:
        self._by_digest.pop(wake_payload(key), None)

    def keys_of(self, payloads: Iterable[str]) -> list[str]:
        """The keys ``payloads`` name; a digest no receiver here holds names none."""
        keys = []
        for payload in payloads:
            key = payload_key(payload)
            if key.startswith(DIGEST_TAG):
                found = self._by_digest.get(key)
                if found is None:
                    continue
                key = found
            keys.append(key)
        return keys


@dataclass(eq=False)
class _Command:
    """Work for the listener thread, done in the order it was asked for."""

    action: str  # "listen", "unlisten" or "ask"
    identifier: str = ""
    done: threading.Event | None = None
    answer: list[str] = field(default_factory=list)
    failed: bool = False


class Listener:
    """Fans notifications out to wake receivers; started by the first subscriber."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection], schema: str, address: str
    ) -> None:
        self._connect = connect
        self._schema = schema
        self._address = address
        # PostgreSQL's wakes do not coalesce: one wake per notification.
        self._fanout = WakeFanout(coalesce=False, on_unsubscribe=self._unsubscribed)
        self._users: dict[str, int] = {}
        """Live receivers per channel identifier: what the server must listen to."""
        self._long_keys = LongKeys()
        self._listening: set[str] = set()
        """What the connection listens to, or will once the queued LISTENs ran."""
        self._commands: queue.Queue[_Command] = queue.Queue()
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._pipe_closed = False
        self._finished = False
        """The thread answered its last command: none may be queued any more."""
        self.reconnects = 0

    def subscribe(self, key: str) -> BufferedWakeReceiver:
        """A receiver of every notify on ``key`` committed after this returns."""
        identifier = channel_identifier(self._schema, key)
        with self._lock:
            if self._stopping:
                raise Closed("the store is closed")
            receiver = self._fanout.subscribe(key)
            self._users[identifier] = self._users.get(identifier, 0) + 1
            self._long_keys.hold(key)
            needs_listen = identifier not in self._listening
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="alkstore-listener", daemon=True
                )
                self._thread.start()
        if needs_listen:
            self._ask(_Command("listen", identifier, threading.Event()))
        return receiver

    def server_channels(self) -> set[str]:
        """The channels the server has the LISTEN connection listening to, asked
        on that connection (``pg_listening_channels()``); empty before the first
        subscriber. A diagnostic.

        Raises:
            Database: the connection is down, or the listener stopped.
        """
        with self._lock:
            if self._thread is None:
                return set()
        command = _Command("ask", done=threading.Event(), failed=True)  # until answered
        self._ask(command)
        if command.failed:
            raise Database("the store's LISTEN connection is not up")
        return set(command.answer)

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._poke()
        if thread is not None:
            thread.join()
        self._fanout.close()
        with self._lock:
            self._users.clear()
        with self._lock:
            self._pipe_closed = True
            for descriptor in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(descriptor)

    def _ask(self, command: _Command) -> None:
        """Queue ``command`` and wait until the thread did it (or cannot)."""
        assert command.done is not None
        with self._lock:
            if self._finished:
                command.failed = True
                return
            self._commands.put(command)
        self._poke()
        command.done.wait()

    def _unsubscribed(self, key: str) -> None:
        """A receiver of ``key`` closed: UNLISTEN once its channel has none left."""
        identifier = channel_identifier(self._schema, key)
        with self._lock:
            if not self._users.get(identifier):
                return  # the listener closed meanwhile and forgot every user
            self._users[identifier] -= 1
            if self._users[identifier]:
                return
            del self._users[identifier]
            self._long_keys.drop(key)
        # Ordered after any LISTEN asked before: a subscribe right after this
        # close either finds the channel still listened, or queues its LISTEN after.
        self._commands.put(_Command("unlisten", identifier))
        self._poke()

    def _poke(self) -> None:
        with self._lock:
            if self._pipe_closed:  # the number may belong to another file by now
                return
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_write, b"!")

    def _run(self) -> None:
        try:
            self._listen_until_closed()
        except BaseException as exc:
            # Anything but a lost connection (handled below) ends the listener:
            # receivers close rather than wait for wakes that cannot come.
            log.exception("the LISTEN connection thread failed; its receivers are closed")
            self._fanout.fail(exc, "the store's LISTEN connection thread died; reopen the store")
            with self._lock:
                self._users.clear()
            if not isinstance(exc, Exception):
                raise
        finally:
            with self._lock:
                self._finished = True
            self._answer_commands()

    def _listen_until_closed(self) -> None:
        connection: psycopg.Connection | None = None
        failures = 0
        down_since: float | None = None
        while not self._stopping:
            try:
                if connection is None or connection.closed:
                    connection = self._reconnect(connection is not None or failures > 0)
                    failures = 0
                    if down_since is not None:
                        log.info(
                            "the LISTEN connection to PostgreSQL at %s is back after %.1f s",
                            self._address,
                            time.monotonic() - down_since,
                        )
                        down_since = None
                self._serve(connection)
            except psycopg.Error as exc:
                if down_since is None:
                    down_since = time.monotonic()
                    self._warn_outage(exc, lost=connection is not None)
                failures += 1
                if connection is not None:
                    with contextlib.suppress(psycopg.Error):
                        connection.close()
                connection = None
                self._pause(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])
        if connection is not None:
            with contextlib.suppress(psycopg.Error):
                connection.close()

    def _warn_outage(self, exc: psycopg.Error, *, lost: bool) -> None:
        """One warning per outage: libpq's reason names no password, and the
        address comes from the parsed target, never the DSN itself."""
        log.warning(
            "the LISTEN connection to PostgreSQL at %s %s: %s; reconnecting with backoff "
            "(receivers get a reconnect wake when it is back)",
            self._address,
            "was lost" if lost else "cannot be made",
            reason(exc),
        )

    def _pause(self, seconds: float) -> None:
        """Sleep between reconnects, answering subscribers and stopping promptly."""
        deadline = time.monotonic() + seconds
        while not self._stopping and (left := deadline - time.monotonic()) > 0:
            self._answer_commands()  # no caller waits on a dead connection
            with selectors.DefaultSelector() as selector:
                selector.register(self._wake_read, selectors.EVENT_READ)
                if selector.select(left):
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_read, 4096)
        self._answer_commands()

    def _reconnect(self, again: bool) -> psycopg.Connection:
        connection = self._connect()
        # Notifications that arrive while a statement runs reach the handler, not _dispatch.
        connection.add_notify_handler(
            lambda notice: self._fanout.deliver(self._long_keys.keys_of([notice.payload]))
        )
        with self._lock:
            self._listening = set()  # subscribers from now on wait for their LISTEN
            wanted = sorted(identifier for identifier, n in self._users.items() if n)
        try:
            _run_all(
                connection, (LISTEN.format(sql.Identifier(identifier)) for identifier in wanted)
            )
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                connection.close()
            raise
        with self._lock:
            self._listening = set(wanted)
        if again:
            self.reconnects += 1
            self._fanout.deliver_to_all(Wake(RECONNECT_CHANNEL))
        return connection

    def _serve(self, connection: psycopg.Connection) -> None:
        socket = connection.pgconn.socket
        with selectors.DefaultSelector() as selector:  # any descriptor number, unlike select()
            selector.register(socket, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self._stopping:
                self._run_commands(connection)
                ready = {key.fd for key, _ in selector.select(5.0)}
                if self._wake_read in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_read, 4096)
                if socket in ready or not ready:
                    connection.pgconn.consume_input()
                    if connection.pgconn.status != psycopg.pq.ConnStatus.OK:
                        raise psycopg.OperationalError("the listener connection was lost")
                    self._dispatch(connection)

    def _run_commands(self, connection: psycopg.Connection) -> None:
        """Run the queued commands in order, many in one round trip; a lost
        connection still releases their callers (channels are listened to again
        on reconnect)."""
        commands = self._take_commands()
        statements: list[sql.Composable] = []
        joining: set[str] = set()
        try:
            for command in commands:
                if command.action == "ask":
                    self._send(connection, statements, joining)
                    rows = connection.execute("SELECT pg_listening_channels()").fetchall()
                    command.answer, command.failed = [row[0] for row in rows], False
                elif (statement := self._statement_for(command, joining)) is not None:
                    statements.append(statement)
            self._send(connection, statements, joining)
        finally:
            for command in commands:
                if command.done is not None:
                    command.done.set()

    def _statement_for(self, command: _Command, joining: set[str]) -> sql.Composable | None:
        """LISTEN or UNLISTEN for ``command``, if the channel needs it now.

        A channel counts as listened (``_listening``) only once its LISTEN ran,
        so a subscriber that finds it there may return at once; until then it
        is ``joining``. An UNLISTEN leaves ``_listening`` before it runs, so a
        subscriber from then on queues a LISTEN that runs after it.
        """
        identifier = command.identifier
        with self._lock:
            listened = identifier in self._listening or identifier in joining
            if command.action == "listen":
                if listened:
                    return None
                joining.add(identifier)
                return LISTEN.format(sql.Identifier(identifier))
            if not listened or self._users.get(identifier):
                return None  # never listened, or a receiver came back since the close
            self._listening.discard(identifier)
            joining.discard(identifier)
            return UNLISTEN.format(sql.Identifier(identifier))

    def _send(
        self, connection: psycopg.Connection, statements: list[sql.Composable], joining: set[str]
    ) -> None:
        _run_all(connection, statements)
        statements.clear()
        with self._lock:
            self._listening |= joining
        joining.clear()

    def _take_commands(self) -> list[_Command]:
        commands = []
        while True:
            try:
                commands.append(self._commands.get_nowait())
            except queue.Empty:
                return commands

    def _answer_commands(self) -> None:
        """Release waiting callers while there is no connection: the channels of
        live receivers are listened to on reconnect; questions go unanswered."""
        for command in self._take_commands():
            command.failed = command.action == "ask"
            if command.done is not None:
                command.done.set()

    def _dispatch(self, connection: psycopg.Connection) -> None:
        payloads = []
        while (notice := connection.pgconn.notifies()) is not None:
            payloads.append(notice.extra.decode())
        if payloads:
            self._fanout.deliver(self._long_keys.keys_of(payloads))


def _run_all(connection: psycopg.Connection, statements: Iterable[sql.Composable]) -> None:
    """Run parameterless statements, up to a thousand per round trip."""
    pending = iter(statements)
    while batch := list(itertools.islice(pending, _STATEMENTS_PER_ROUND_TRIP)):
        connection.execute(sql.SQL("; ").join(batch))
