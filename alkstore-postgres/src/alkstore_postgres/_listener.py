"""Wakes through LISTEN/NOTIFY on one dedicated connection per Store.

One thread owns the connection: it runs LISTEN for new channels, sleeps in
``select`` on the socket, and hands each notification to the receivers of
its channel. When the connection drops it reconnects with backoff, listens
again to every channel, and sends every receiver
``Wake("__alkstore_listener_reconnected__")``: anything may have happened
while it was away, so everyone re-reads.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import threading
import time
from collections.abc import Callable

import psycopg

from alkstore import RECONNECT_CHANNEL, Closed, Database, Wake
from alkstore.engine import BufferedWakeReceiver
from alkstore_postgres._names import channel_identifier, unstored

__all__ = ["Listener"]

_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class Listener:
    """Fans notifications out to wake receivers; started by the first subscriber."""

    def __init__(self, connect: Callable[[], psycopg.Connection], schema: str) -> None:
        self._connect = connect
        self._schema = schema
        self._receivers: dict[str, set[BufferedWakeReceiver]] = {}
        self._listening: set[str] = set()
        self._commands: queue.Queue[tuple[str, threading.Event]] = queue.Queue()
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._pipe_closed = False
        self._dead = False
        self.reconnects = 0

    def subscribe(self, key: str) -> BufferedWakeReceiver:
        """A receiver of every notify on ``key`` committed after this returns."""
        receiver = BufferedWakeReceiver(key, coalesce=False, on_close=self._unsubscribe)
        identifier = channel_identifier(self._schema, key)
        with self._lock:
            if self._stopping:
                raise Closed("the store is closed")
            if self._dead:
                raise Database("the store's LISTEN connection thread died; reopen the store")
            self._receivers.setdefault(key, set()).add(receiver)
            needs_listen = identifier not in self._listening
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="alkstore-listener", daemon=True
                )
                self._thread.start()
        if needs_listen:
            done = threading.Event()
            self._commands.put((identifier, done))
            self._poke()
            done.wait()
        return receiver

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._poke()
        if thread is not None:
            thread.join()
        self._shut_all()
        with self._lock:
            self._pipe_closed = True
            for descriptor in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(descriptor)

    def _unsubscribe(self, receiver: BufferedWakeReceiver) -> None:
        with self._lock:
            group = self._receivers.get(receiver.channel)
            if group is not None:
                group.discard(receiver)
                if not group:
                    del self._receivers[receiver.channel]

    def _poke(self) -> None:
        with self._lock:
            if self._pipe_closed:  # the number may belong to another file by now
                return
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_write, b"!")

    def _run(self) -> None:
        try:
            self._listen_until_closed()
        except BaseException:
            # Anything but a lost connection (handled below) ends the listener:
            # receivers close rather than wait for wakes that cannot come.
            self._dead = True
            self._answer_commands()
            self._shut_all()
            raise

    def _listen_until_closed(self) -> None:
        connection: psycopg.Connection | None = None
        failures = 0
        while not self._stopping:
            try:
                if connection is None or connection.closed:
                    connection = self._reconnect(connection is not None or failures > 0)
                    failures = 0
                self._serve(connection)
            except psycopg.Error:
                failures += 1
                if connection is not None:
                    with contextlib.suppress(psycopg.Error):
                        connection.close()
                connection = None
                self._answer_commands()  # no caller waits on a dead connection
                time.sleep(_BACKOFF_S[min(failures, len(_BACKOFF_S)) - 1])
        if connection is not None:
            with contextlib.suppress(psycopg.Error):
                connection.close()
        self._answer_commands()

    def _reconnect(self, again: bool) -> psycopg.Connection:
        connection = self._connect()
        # Notifications that arrive while a LISTEN runs reach the handler, not _dispatch.
        connection.add_notify_handler(lambda notice: self._deliver([unstored(notice.payload)]))
        for identifier in sorted(self._listening):
            connection.execute(f'LISTEN "{identifier}"')
        if again:
            self.reconnects += 1
            with self._lock:
                receivers = [r for group in self._receivers.values() for r in group]
            for receiver in receivers:
                receiver.deliver(Wake(RECONNECT_CHANNEL))
        return connection

    def _serve(self, connection: psycopg.Connection) -> None:
        socket = connection.pgconn.socket
        while not self._stopping:
            self._run_commands(connection)
            readable, _, _ = select.select([socket, self._wake_read], [], [], 5.0)
            if self._wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_read, 4096)
            if socket in readable or not readable:
                connection.pgconn.consume_input()
                if connection.pgconn.status != psycopg.pq.ConnStatus.OK:
                    raise psycopg.OperationalError("the listener connection was lost")
                self._dispatch(connection)

    def _run_commands(self, connection: psycopg.Connection) -> None:
        while True:
            try:
                identifier, done = self._commands.get_nowait()
            except queue.Empty:
                return
            if identifier not in self._listening:
                connection.execute(f'LISTEN "{identifier}"')
                self._listening.add(identifier)
            done.set()

    def _answer_commands(self) -> None:
        """Release waiting subscribers; their channels are listened on reconnect."""
        while True:
            try:
                identifier, done = self._commands.get_nowait()
            except queue.Empty:
                return
            self._listening.add(identifier)
            done.set()

    def _dispatch(self, connection: psycopg.Connection) -> None:
        keys = []
        while (notice := connection.pgconn.notifies()) is not None:
            keys.append(unstored(notice.extra.decode()))
        if keys:
            self._deliver(keys)

    def _deliver(self, keys: list[str]) -> None:
        """One wake per notification: PostgreSQL's wakes do not coalesce."""
        with self._lock:
            targets = [(key, r) for key in keys for r in self._receivers.get(key, ())]
        for key, receiver in targets:
            receiver.deliver(Wake(key))

    def _shut_all(self) -> None:
        with self._lock:
            receivers = [r for group in self._receivers.values() for r in group]
            self._receivers.clear()
        for receiver in receivers:
            receiver.shut()
