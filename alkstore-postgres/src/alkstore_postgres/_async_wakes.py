"""Wakes through LISTEN/NOTIFY for the async store: one ``AsyncConnection``,
owned by one task on the store's event loop (no thread).

The task keeps the server listening to exactly the channels that have a
receiver: after each change it runs the LISTENs and UNLISTENs that bring the
connection there, in one round trip, and a ``listen`` returns once its
channel is listened to. Between changes it waits for the socket to turn
readable and hands each notification to the receivers of its channel. When
the connection drops it behaves as the sync listener (``_wakes``) does: one
warning, reconnects with backoff, listens again to every channel that still
has a receiver, logs when it is back, and sends every receiver
``Wake("__alkstore_listener_reconnected__")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable

import psycopg
from psycopg import sql

from alkstore import RECONNECT_CHANNEL, Closed, Database, Wake
from alkstore.engine import BufferedWakeReceiver, WakeFanout
from alkstore_postgres._errors import reason
from alkstore_postgres._names import channel_identifier
from alkstore_postgres._wakes import BACKOFF_S, LISTEN, UNLISTEN, LongKeys

__all__ = ["AsyncListener"]

log = logging.getLogger("alkstore.postgres")

_STATEMENTS_PER_ROUND_TRIP = 1000
_IDLE_LOOK_S = 5.0
"""How often an idle connection is looked at even when its socket stays quiet."""


class AsyncListener:
    """Fans notifications out to wake receivers; its task starts with the first subscriber."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[psycopg.AsyncConnection]],
        schema: str,
        address: str,
    ) -> None:
        self._connect = connect
        self._schema = schema
        self._address = address
        # PostgreSQL's wakes do not coalesce: one wake per notification.
        self._fanout = WakeFanout(coalesce=False, on_unsubscribe=self._unsubscribed)
        self._lock = threading.Lock()  # receivers may close on any thread
        self._users: dict[str, int] = {}
        """Live receivers per channel identifier: what the server must listen to."""
        self._long_keys = LongKeys()
        self._listening: set[str] = set()
        """What the connection listens to (a LISTEN ran, no UNLISTEN was sent since)."""
        self._joiners: dict[str, list[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._nudge: asyncio.Future[None] | None = None
        self._nudged = False
        self._questions: list[asyncio.Future[set[str]]] = []
        self._up = False
        self._owe_reconnect_wake = False
        """The connection went down: when it is back, every receiver gets a wake."""
        self._stopping = False
        self._connection: psycopg.AsyncConnection | None = None
        self.reconnects = 0

    async def subscribe(self, key: str) -> BufferedWakeReceiver:
        """A receiver of every notify on ``key`` committed after this returns."""
        identifier = channel_identifier(self._schema, key)
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._stopping:
                raise Closed("the store is closed")
            receiver = self._fanout.subscribe(key)
            self._users[identifier] = self._users.get(identifier, 0) + 1
            self._long_keys.hold(key)
            # While down after an outage, the reconnect wake covers a new receiver;
            # before the first connection there is none to cover it: wait.
            joined = identifier in self._listening or (not self._up and self._owe_reconnect_wake)
        if self._task is None:
            self._loop = loop
            self._task = loop.create_task(self._run(), name="alkstore-async-listener")
        if joined:
            return receiver  # listened already, or down: the reconnect wake covers it
        joiner: asyncio.Future[None] = loop.create_future()
        self._joiners.setdefault(identifier, []).append(joiner)
        self._nudge_soon()
        try:
            await asyncio.shield(joiner)
        except BaseException:
            receiver.close()
            raise
        self._fanout.check_usable()
        return receiver

    async def server_channels(self) -> set[str]:
        """The channels the server has the LISTEN connection listening to, asked
        on that connection (``pg_listening_channels()``) by the listener's task;
        empty before the first subscriber. A diagnostic.

        Raises:
            Database: the connection is down, or the listener stopped.
        """
        if self._task is None:
            return set()
        if self._task.done() or not self._up:
            raise Database("the store's LISTEN connection is not up")
        question: asyncio.Future[set[str]] = asyncio.get_running_loop().create_future()
        self._questions.append(question)
        self._nudge_soon()
        return await question

    async def close(self) -> None:
        with self._lock:
            self._stopping = True
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        self._fanout.close()
        with self._lock:
            self._users.clear()
        self._release_joiners()

    def _unsubscribed(self, key: str) -> None:
        """A receiver of ``key`` closed (on any thread): UNLISTEN once none is left."""
        identifier = channel_identifier(self._schema, key)
        with self._lock:
            if not self._users.get(identifier):
                return  # the listener closed meanwhile and forgot every user
            self._users[identifier] -= 1
            if self._users[identifier]:
                return
            del self._users[identifier]
            self._long_keys.drop(key)
        self._nudge_soon()

    def _nudge_soon(self) -> None:
        """Have the task look at what to listen to (from any thread)."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens any more
            loop.call_soon_threadsafe(self._nudge_now)

    def _nudge_now(self) -> None:
        self._nudged = True
        nudge = self._nudge
        if nudge is not None and not nudge.done():
            nudge.set_result(None)

    async def _run(self) -> None:
        try:
            await self._listen_until_closed()
        except asyncio.CancelledError:
            if not self._stopping:
                raise
        except BaseException as exc:
            # Anything but a lost connection (handled below) ends the listener:
            # receivers close rather than wait for wakes that cannot come.
            log.exception("the LISTEN connection task failed; its receivers are closed")
            self._fanout.fail(exc, "the store's LISTEN connection task died; reopen the store")
            with self._lock:
                self._users.clear()
            if not isinstance(exc, Exception):
                raise
        finally:
            self._up = False
            self._release_joiners()

    async def _listen_until_closed(self) -> None:
        connection: psycopg.AsyncConnection | None = None
        failures = 0
        down_since: float | None = None
        try:
            while not self._stopping:
                try:
                    if connection is None or connection.closed:
                        connection = await self._reconnect()
                        failures = 0
                        if down_since is not None:
                            log.info(
                                "the LISTEN connection to PostgreSQL at %s is back after %.1f s",
                                self._address,
                                time.monotonic() - down_since,
                            )
                            down_since = None
                    await self._serve(connection)
                except psycopg.Error as exc:
                    if down_since is None:
                        down_since = time.monotonic()
                        self._warn_outage(exc, lost=connection is not None)
                    failures += 1
                    self._down()
                    if connection is not None:
                        await _close_quietly(connection)
                    connection = None
                    await self._pause(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])
        finally:
            self._connection = None
            if connection is not None:
                await _close_quietly(connection)

    def _down(self) -> None:
        """The connection is gone: what it listened to goes with it, and no
        subscriber waits for it (the reconnect wake covers them)."""
        self._up = False
        self._owe_reconnect_wake = True
        self._connection = None
        self._listening = set()
        self._release_joiners()

    def _warn_outage(self, exc: psycopg.Error, *, lost: bool) -> None:
        """One warning per outage (see ``_wakes.Listener._warn_outage``)."""
        log.warning(
            "the LISTEN connection to PostgreSQL at %s %s: %s; reconnecting with backoff "
            "(receivers get a reconnect wake when it is back)",
            self._address,
            "was lost" if lost else "cannot be made",
            reason(exc),
        )

    async def _pause(self, seconds: float) -> None:
        """Sleep between reconnects; stop promptly when the store closes."""
        deadline = time.monotonic() + seconds
        while not self._stopping and (left := deadline - time.monotonic()) > 0:
            # A nudge (a receiver came or went) is taken here: left set, it would
            # make every wait below return at once, and the loop spin the CPU
            # without yielding to the event loop for the rest of the outage.
            self._nudged = False
            self._release_joiners()  # no subscriber waits on a dead connection
            await self._wait_for_nudge(None, left)

    async def _reconnect(self) -> psycopg.AsyncConnection:
        connection = await self._connect()
        try:
            # Notifications that arrive while a statement runs reach the handler.
            connection.add_notify_handler(
                lambda notice: self._fanout.deliver(self._long_keys.keys_of([notice.payload]))
            )
            listening = await self._listen_to_every_user(connection)
        except BaseException:
            await _close_quietly(connection)
            raise
        # No await from here on: a receiver subscribing next sees the listener up.
        self._listening = listening
        self._connection = connection
        self._up = True
        self._release_joiners()
        if self._owe_reconnect_wake:
            self._owe_reconnect_wake = False
            self.reconnects += 1
            self._fanout.deliver_to_all(Wake(RECONNECT_CHANNEL))
        return connection

    async def _listen_to_every_user(self, connection: psycopg.AsyncConnection) -> set[str]:
        """LISTEN to every channel with a receiver, those that subscribe meanwhile
        included: the listener is up only once nobody waits for a LISTEN."""
        listening: set[str] = set()
        while True:
            with self._lock:
                missing = sorted(i for i, n in self._users.items() if n and i not in listening)
            if not missing:
                return listening
            await _run_all(connection, (LISTEN.format(sql.Identifier(i)) for i in missing))
            listening.update(missing)

    async def _serve(self, connection: psycopg.AsyncConnection) -> None:
        while not self._stopping:
            self._nudged = False
            await self._listen_to_wanted(connection)
            await self._answer_questions(connection)
            await self._wait_for_nudge(connection.pgconn.socket, _IDLE_LOOK_S)
            connection.pgconn.consume_input()
            if connection.pgconn.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the listener connection was lost")
            payloads = []
            while (notice := connection.pgconn.notifies()) is not None:
                payloads.append(notice.extra.decode())
            if payloads:
                self._fanout.deliver(self._long_keys.keys_of(payloads))

    async def _listen_to_wanted(self, connection: psycopg.AsyncConnection) -> None:
        """LISTEN to the channels that gained receivers, UNLISTEN those that have
        none left. A channel counts as listened only once its LISTEN ran; it stops
        counting before its UNLISTEN goes, so a subscriber meanwhile waits for
        the LISTEN that follows."""
        with self._lock:
            wanted = {identifier for identifier, n in self._users.items() if n}
        joining = sorted(wanted - self._listening)
        leaving = sorted(self._listening - wanted)
        self._listening -= set(leaving)
        await _run_all(
            connection,
            itertools.chain(
                (UNLISTEN.format(sql.Identifier(i)) for i in leaving),
                (LISTEN.format(sql.Identifier(i)) for i in joining),
            ),
        )
        self._listening |= set(joining)
        # Who wants what now, not before the round trip: a receiver that subscribed
        # meanwhile waits for the next round (its nudge brings one at once).
        with self._lock:
            wanted = {identifier for identifier, n in self._users.items() if n}
        for identifier in list(self._joiners):
            if identifier in self._listening or identifier not in wanted:
                _resolve_all(self._joiners.pop(identifier))

    async def _wait_for_nudge(self, socket: int | None, timeout: float | None) -> None:
        """Wait until nudged, ``socket`` turns readable, or ``timeout`` passes."""
        if self._nudged or self._stopping:
            return
        loop = asyncio.get_running_loop()
        nudge = self._nudge = loop.create_future()
        if socket is not None:
            loop.add_reader(socket, _resolve, nudge)
        try:
            await asyncio.wait_for(nudge, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self._nudge = None
            if socket is not None:
                loop.remove_reader(socket)

    def _release_joiners(self) -> None:
        """Let every waiting subscriber return; questions go unanswered."""
        joiners, self._joiners = self._joiners, {}
        for waiting in joiners.values():
            _resolve_all(waiting)
        questions, self._questions = self._questions, []
        for question in questions:
            if not question.done():
                question.set_exception(Database("the store's LISTEN connection is not up"))

    async def _answer_questions(self, connection: psycopg.AsyncConnection) -> None:
        questions, self._questions = self._questions, []
        if not questions:
            return
        try:
            rows = await (await connection.execute("SELECT pg_listening_channels()")).fetchall()
        except BaseException:
            self._questions.extend(questions)  # answered (with the error) by _release_joiners
            raise
        for question in questions:
            if not question.done():
                question.set_result({row[0] for row in rows})


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _resolve_all(futures: Iterable[asyncio.Future[None]]) -> None:
    for future in futures:
        _resolve(future)


async def _run_all(
    connection: psycopg.AsyncConnection, statements: Iterable[sql.Composable]
) -> None:
    """Run parameterless statements, up to a thousand per round trip."""
    pending = iter(statements)
    while batch := list(itertools.islice(pending, _STATEMENTS_PER_ROUND_TRIP)):
        await connection.execute(sql.SQL("; ").join(batch))


async def _close_quietly(connection: psycopg.AsyncConnection) -> None:
    with contextlib.suppress(psycopg.Error):
        await connection.close()
